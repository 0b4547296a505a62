"""Preemption costs minutes, not epochs: checkpoints every N steps or M minutes, and a clean stop on SIGTERM.

A spot or preemptible TPU VM gets a SIGTERM and about 30 seconds. The handler here only notes
the signal; the loop finishes the step in flight, every process agrees at the same step
boundary, a checkpoint is written, and the run exits with PREEMPTED_EXIT. `--resume` then
continues with the next batch of the same epoch.

Agreement is a host-side all-reduce over a gloo group (no XLA graph, no device transfer),
made at each step boundary only when there are several processes.
"""

import signal
import threading
import time

# EX_TEMPFAIL: a temporary failure, to be retried (here: with --resume).
PREEMPTED_EXIT = 75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(RuntimeError):
    """The run stopped on a signal after writing a checkpoint; the message says how to continue."""

    every_process = True
    exit_code = PREEMPTED_EXIT


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


class SavePolicy:
    """When a step checkpoint is due: every `save_steps` optimizer steps, or `save_minutes` after the last save."""

    def __init__(self, save_steps: int | None, save_minutes: float | None):
        self.save_steps, self.save_minutes = save_steps, save_minutes
        self._last = time.monotonic()

    def due(self, global_step: int) -> bool:
        by_steps = bool(self.save_steps) and global_step % self.save_steps == 0
        by_time = bool(self.save_minutes) and time.monotonic() - self._last >= self.save_minutes * 60
        return by_steps or by_time

    def saved(self) -> None:
        self._last = time.monotonic()


_HOST_GROUP = []


def agree(accelerator, *flags: bool) -> list[bool]:
    """Each flag true on any process is true on every process, so that all take the same decision at one step."""
    if accelerator.num_processes == 1:
        return list(flags)
    import torch
    import torch.distributed as dist

    values = torch.tensor([int(flag) for flag in flags], dtype=torch.int32)
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=_host_group())
    return [bool(value) for value in values.tolist()]


def _host_group():
    """gloo (host memory): the default group on the CPU; on XLA or GPUs its collectives would be device work."""
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return None
    if not _HOST_GROUP:
        _HOST_GROUP.append(dist.new_group(backend="gloo"))
    return _HOST_GROUP[0]
