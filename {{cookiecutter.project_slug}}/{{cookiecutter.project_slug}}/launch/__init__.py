"""How a run starts and its processes agree: the installed stack, hosts, processes, and the notebook's launch guard.

  environment.py   whether the installed stack can run as asked (torch and torch_xla paired, libtpu, a TPU)
  hosts.py         which host this is and how many (fsdp on a pod: one process per host)
  processes.py     what the processes of a run agree on: decisions, barriers, sums, one voice for messages
  main_process.py  what the main process does for all (prepare the data, decide), and every process stopping with it
{%- if cookiecutter.variants != 'script' %}
  launch_guard.py  the check the notebook runs before launching (a device touched too early)
{%- endif %}
  library_noise.py the library warnings that say nothing to a user, silenced in one place
"""
