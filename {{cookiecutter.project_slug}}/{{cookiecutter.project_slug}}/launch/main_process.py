"""Work the main process does for every process (preparing the data, deciding), and stopping together when it fails.

The others wait for that work, so a problem the main process meets there is theirs too: they are told, not let go, and
every process stops at that point with the main process's exit status; then they leave together (cli.py), so that none
exits while another still waits for it in a collective.
"""

from contextlib import contextmanager

from ..config.errors import UserError
from . import hosts
from .processes import is_main


class StoppedByTheMainProcess(UserError):
    """The main process stopped the run (a refusal, a failure) where this process waited for its work: this one stops
    too, at the same point and with the same exit status. The command line says nothing more (the main process said
    why); the message carries the main process's reason all the same, because a launcher that collects the processes'
    errors (notebook_launcher's torch.multiprocessing) reports whichever process ended first."""

    every_process = True

    def __init__(self, stopped: tuple[int, str]):
        exit_code, why = stopped
        super().__init__(f"the main process stopped the run: {why}")
        self.exit_code = exit_code


def _several(accelerator) -> bool:
    return bool(hosts.joined()) or accelerator.num_processes > 1


def _stopping(error: BaseException) -> tuple[int, str]:
    """(the exit status, the reason) every process stops with when the main process raised `error` in work the others
    wait for.

    A problem said in one line (UserError) becomes every process's: each raises it at this point, so the command line
    says it once and the processes leave together (cli.py). Anything else is a bug, whose trace the main process keeps."""
    why = f"{type(error).__name__}: {error}"
    if isinstance(error, UserError):
        error.every_process = True
        return error.exit_code, why
    return 1, why


def _from_the_main_process(accelerator, outcome):
    """The main process's `outcome` (a small picklable host object), on every process: the others pass None."""
    box = [outcome]
    if hosts.joined():
        import torch.distributed as dist

        dist.broadcast_object_list(box, src=0)
    else:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(box, from_process=0)
    return box[0]


@contextmanager
def main_process_first(accelerator):
    """The block runs in the main process, then in the others (which read what it made).

    Where the main process's block raises, the others are not let go into theirs: they are told, and every process
    stops there with the main process's exit status. (Accelerate's main_process_first lets the others wait in a barrier
    that the main process leaves by exiting: seen, a gloo "Connection closed by peer" trace in the other process, or
    its SIGABRT, "terminate called without an active exception", where the refusal's status 2 was due.)"""
    if not _several(accelerator):
        yield
        return
    if not is_main(accelerator):
        stopped = _from_the_main_process(accelerator, None)
        if stopped is not None:
            raise StoppedByTheMainProcess(stopped)
        yield
        return
    try:
        yield
    except BaseException as error:
        _from_the_main_process(accelerator, _stopping(error))
        raise
    _from_the_main_process(accelerator, None)


def main_process_decides(accelerator, decide):
    """Run `decide()` on the main process only and hand its answer to every process.

    Whatever depends on the outside world (is the hub reachable, which checkpoint is the newest)
    is decided once: probed in every process, the answers can differ and the processes would
    train different models or resume from different epochs. A decision that raises stops every process, as
    main_process_first's block does.
    """
    if not _several(accelerator):
        return decide()
    if not is_main(accelerator):
        kind, value = _from_the_main_process(accelerator, None)
        if kind == "stopped":
            raise StoppedByTheMainProcess(value)
        return value
    try:
        answer = decide()
    except BaseException as error:
        _from_the_main_process(accelerator, ("stopped", _stopping(error)))
        raise
    return _from_the_main_process(accelerator, ("decided", answer))[1]


def leave_together(seconds: float = 60.0) -> None:
    """After a problem at which every process stopped (UserError.every_process): wait for the others (at most
    `seconds`), then close the processes' gloo group, as a finished run's end does, so that no process exits while
    another still holds connections to it. (Once, under load, host 1 of such a refusal ended in SIGABRT instead of its
    exit status 2.) Accelerate's XLA processes have no gloo group: their launcher ends them."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"):
        hosts.left()
        return
    import datetime

    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=seconds))  # gloo's barrier that gives up
        dist.destroy_process_group()
    except RuntimeError:
        pass  # a process that never came: leave all the same, with the exit status already decided
    hosts.left()
