"""Run one measurement in a fresh process, forked from a parent that never touched a device.

torch_xla reads XLA_USE_BF16 / XLA_DOWNCAST_BF16 once per process and keeps one
in-memory graph cache per process, so each mode and each grid cell needs its own
process for its compilations to be counted. Forking (as notebook_launcher and
xmp.spawn do on Colab and Kaggle) skips re-importing torch, torch_xla and
transformers in every child: about 10 CPU-seconds each. A parent that did start the
runtime (an interactive session, a test that computed on the device) gets a slower,
clean "spawn" child instead of a broken fork. `Runs` runs several such children at
a time, each on CPUs of its own (a comparison of many short runs on a CPU host).
"""

import multiprocessing
import os
import sys
import time
import traceback
from multiprocessing.connection import wait

# Imported once here so that every forked child starts with them loaded.
PRELOAD = ("torch", "torch_xla", "torch_xla.debug.metrics", "transformers", "accelerate", "datasets")


class ChildFailed(RuntimeError):
    """The measurement raised or died in its process; the message carries the child's traceback."""


def preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def parent_is_clean() -> bool:
    """True while this process has not started an XLA runtime that a child would inherit half-alive."""
    if "torch_xla" not in sys.modules:
        return True
    return not sys.modules["torch_xla"]._XLAC._xla_runtime_is_initialized()


def _child(send, function, args, cpus=None):
    try:
        if cpus:  # before the runtime starts: XLA:CPU sizes its thread pool by the CPUs it may run on
            os.sched_setaffinity(0, cpus)
        send.send(("ok", function(*args)))
    except BaseException:  # everything, including SystemExit, must reach the parent as text
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()


def _start(function, args, cpus=None):
    context = multiprocessing.get_context("fork" if parent_is_clean() else "spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(send, function, args, cpus), daemon=True)
    process.start()
    send.close()
    return process, receive


def _answer(process, receive):
    """The child's result, or a ChildFailed with its traceback; once its answer is ready or it has exited."""
    try:
        status, payload = receive.recv()
    except EOFError:
        status, payload = "error", "the child exited without an answer"
    finally:
        receive.close()
        process.join(timeout=60)
    if status != "ok":
        return ChildFailed(f"{payload}\n(exit code {process.exitcode})")
    return payload


def run(function, *args, timeout: float = 1800):
    """function(*args) in a fresh child process; returns its (picklable) result or raises ChildFailed.

    Under "spawn" the function and its arguments must be importable and picklable.
    """
    process, receive = _start(function, args)
    if not receive.poll(timeout):
        process.kill()
        process.join(timeout=60)
        raise ChildFailed(f"{getattr(function, '__name__', function)} gave no answer in {timeout:.0f} s")
    result = _answer(process, receive)
    if isinstance(result, ChildFailed):
        raise result
    return result


def cpu_shares(at_once: int) -> list[list[int]]:
    """This process's CPUs dealt into `at_once` disjoint shares (fewer when there are fewer CPUs)."""
    cpus = sorted(os.sched_getaffinity(0))
    count = max(1, min(at_once, len(cpus)))
    return [cpus[index::count] for index in range(count)]


class Runs:
    """Calls, each in a fresh child, `at_once` children at a time; `result(key)` waits for one of them.

    With more than one at a time each child is pinned to a share of this process's CPUs of its own (cpu_shares),
    so that the children do not take each other's cores: what one measures (its step time) is what its share
    gives, the same for every call. Children start in the order of `calls` as shares free up, while a caller
    waits in `result`: no thread of this process forks.
    """

    def __init__(self, calls: dict, at_once: int = 1, timeout: float = 1800):
        self.shares = cpu_shares(at_once) if at_once > 1 else [None]
        self.free = list(range(len(self.shares)))
        self.waiting = list(calls.items())  # key -> (function, *args)
        self.running = {}  # receiving end -> (key, process, name, share, deadline)
        self.done = {}  # key -> result, or the ChildFailed it gave
        self.timeout = timeout

    def result(self, key):
        """The call's result, once it is in; raises ChildFailed if it raised, died or gave no answer in time."""
        while key not in self.done:
            if not self.running and not self.waiting:
                raise KeyError(key)
            self._step()
        if isinstance(self.done[key], ChildFailed):
            raise self.done[key]
        return self.done[key]

    def _step(self) -> None:
        while self.waiting and self.free:
            key, (function, *args) = self.waiting.pop(0)
            share = self.free.pop(0)
            process, receive = _start(function, tuple(args), self.shares[share])
            name = getattr(function, "__name__", str(function))
            self.running[receive] = (key, process, name, share, time.monotonic() + self.timeout)
        soonest = min(deadline for *_, deadline in self.running.values())
        for receive in wait(list(self.running), timeout=max(0.0, soonest - time.monotonic())):
            key, process, _, share, _ = self.running.pop(receive)
            self.done[key] = _answer(process, receive)
            self.free.append(share)
        for receive, (key, _, name, _, deadline) in list(self.running.items()):
            if time.monotonic() > deadline and not receive.poll():
                self._stop(receive)
                self.done[key] = ChildFailed(f"{name} gave no answer in {self.timeout:.0f} s")

    def _stop(self, receive) -> None:
        _, process, _, share, _ = self.running.pop(receive)
        process.kill()
        process.join(timeout=60)
        receive.close()
        self.free.append(share)

    def close(self) -> None:
        """Stop the children still running and forget the calls not started."""
        self.waiting.clear()
        for receive in list(self.running):
            self._stop(receive)
