"""What a run is watched with: compilation counts and the cache, the recompilation watch, the logs, host memory.

  compilations.py      how many graphs this process compiled, in how long, and the persistent cache's folder
  compile_analysis.py  torch_xla's own account of each compilation (cause, Python line), parsed
  graph_watch.py       the recompilation watch, a callback: every graph, and why one after warm-up appeared
  metrics_log.py       every --logging_steps: loss, learning rate, gradient norm, speed, read on a thread of its own
  curves.py            the run's picture (loss, eval metric, learning rate against the step) from metrics.jsonl
  flops.py             model FLOPs per token, FLOP/s per chip, and MFU where the chip's peak is known
  step_profile.py      --profile_steps: torch_xla's profiler trace of chosen steps, a callback
  host_tracing.py      the host's seconds per step up to the graph's hand-over, and on a TPU its share of the step
{%- if cookiecutter.task == 'text-classification' and cookiecutter.include_benchmarks %}
  memory.py            host memory (Pss) summed over a process tree: the shared-model benchmark's instrument
{%- endif %}
"""
