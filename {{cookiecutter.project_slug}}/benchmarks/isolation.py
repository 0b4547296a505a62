"""Run one measurement in a fresh process, forked from a parent that never touched a device.

torch_xla reads XLA_USE_BF16 / XLA_DOWNCAST_BF16 once per process and keeps one
in-memory graph cache per process, so each mode and each grid cell needs its own
process for its compilations to be counted. Forking (as notebook_launcher and
xmp.spawn do on Colab and Kaggle) skips re-importing torch, torch_xla and
transformers in every child: about 10 CPU-seconds each. A parent that did start the
runtime (an interactive session, a test that computed on the device) gets a slower,
clean "spawn" child instead of a broken fork.
"""

import multiprocessing
import sys
import traceback

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


def _child(send, function, args):
    try:
        send.send(("ok", function(*args)))
    except BaseException:  # everything, including SystemExit, must reach the parent as text
        send.send(("error", traceback.format_exc()))
    finally:
        send.close()


def run(function, *args, timeout: float = 1800):
    """function(*args) in a fresh child process; returns its (picklable) result or raises ChildFailed.

    Under "spawn" the function and its arguments must be importable and picklable.
    """
    context = multiprocessing.get_context("fork" if parent_is_clean() else "spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(send, function, args), daemon=True)
    process.start()
    send.close()
    try:
        if not receive.poll(timeout):
            process.kill()
            raise ChildFailed(f"{getattr(function, '__name__', function)} gave no answer in {timeout:.0f} s")
        status, payload = receive.recv()
    except EOFError:
        status, payload = "error", "the child exited without an answer"
    finally:
        process.join(timeout=60)
    if status != "ok":
        raise ChildFailed(f"{payload}\n(exit code {process.exitcode})")
    return payload
