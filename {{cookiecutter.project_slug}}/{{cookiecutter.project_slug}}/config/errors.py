"""`UserError`: the one base class of every problem this package says to its user in one line instead of a stack trace.

Bad input, a data file that cannot work, a refused resume, a stack that cannot run, a preemption, a non-finite loss:
each is a subclass, defined where it is raised (every floor imports this, the lowest one). The command lines
(cli.py, predict_cli.py, plan_cli.py) catch this class alone and end the process with `exit_code`; anything else
is a bug in this package and keeps its stack trace.
"""


class UserError(Exception):
    """A problem the user can act on: its message is the one line they see, naming what to change."""

    # The process's exit status: 2 for bad input (argparse's), others where a scheduler must tell them apart.
    exit_code = 2
    # What the line starts with: "error", or "stopped" for a run that stopped on purpose (a preemption).
    said_as = "error"
    # True when every process raises the same problem at the same point, so the command line says it once and
    # the hosts leave together; False when one process alone may raise it.
    every_process = False
