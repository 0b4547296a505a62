"""Preemption costs minutes, not epochs: checkpoints every N steps or M minutes, and a clean stop on SIGTERM.

A spot or preemptible TPU VM gets a SIGTERM and about 30 seconds. The handler here only notes
the signal; the loop finishes the step in flight, every process agrees at the same step
boundary, a checkpoint is written, and the run exits with PREEMPTED_EXIT. `--resume` then
continues with the next batch of the same epoch.

Agreement is a host-side all-reduce over a gloo group (no XLA graph, no device transfer),
made at each step boundary only when there are several processes. The checkpoint itself is
checkpoint_schedule.py's; this module is the callback (callbacks.py) that asks for it and stops.
"""

import signal
import threading

from ..config.errors import UserError
from ..launch.processes import agree

# EX_TEMPFAIL: a temporary failure, to be retried (here: with --resume).
PREEMPTED_EXIT = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(UserError, RuntimeError):
    """The run stopped on a signal after writing a checkpoint; the message says how to continue."""

    every_process = True
    exit_code = PREEMPTED_EXIT
    said_as = "stopped"  # not an error: the run stopped where it was told to, and continues with --resume


class StopSignals:
    """While active, SIGTERM and SIGINT are noted instead of ending the process."""

    def __init__(self):
        self.received: int | None = None
        self._previous = {}

    def __enter__(self) -> "StopSignals":
        # Python delivers signals to the main thread only; elsewhere (a notebook thread) nothing is installed.
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                # A signal the process ignores (SIGINT in a background job) stays ignored.
                if signal.getsignal(number) is not signal.SIG_IGN:
                    self._previous[number] = signal.signal(number, self._note)
        return self

    def _note(self, number, frame) -> None:
        self.received = number
        # A second signal acts as usual (a user who presses Ctrl-C twice does not want to wait).
        for other, handler in self._previous.items():
            signal.signal(other, handler)

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    @property
    def name(self) -> str | None:
        return signal.Signals(self.received).name if self.received else None


class Preemption:
    """Notes stop signals during the run; at the next step boundary (or epoch end) saves and stops every process."""

    def __init__(self, accelerator, checkpoints):
        self.accelerator, self.checkpoints = accelerator, checkpoints
        self.signals = StopSignals()

    def on_fit_start(self, run) -> None:
        self.signals.__enter__()

    def on_fit_end(self, run) -> None:
        self.signals.__exit__(None, None, None)

    def at_step_boundary(self, run) -> None:
        if self._asked():
            if self.checkpoints.enabled and not self.checkpoints.saved_at(run.global_step):
                self.checkpoints.save(run, inside_epoch=True)
            raise self._stopped(run)

    def at_epoch_end(self, run) -> None:
        # A signal during the evaluation or the epoch's checkpoint (written just before this point).
        if self._asked():
            raise self._stopped(run)

    def _asked(self) -> bool:
        (stop,) = agree(self.accelerator, self.signals.received is not None)
        return stop

    def _stopped(self, run) -> Preempted:
        kept = (f"checkpoint {self.checkpoints.last} written; run again with --resume to continue from the next batch"
                if self.checkpoints.enabled else "no checkpoint (--checkpoint false): a new run starts from scratch")
        return Preempted(f"preempted ({self.signals.name or 'by another process'}) at epoch {run.epoch + 1} "
                         f"step {run.step}: {kept}")
