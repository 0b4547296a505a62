"""Python's garbage collector during a run: the objects alive when it starts are left out of its full collections.

torch, torch_xla, transformers and the trackers keep about a million objects alive, and a full collection walks them
all. In the benchmarks' 24-step demo run (XLA:CPU) two full collections took 0.55 s of a 5.7 s wall: one fell inside
TensorBoard's import, the other was Accelerate's `free_memory` at the end. `gc.freeze()` moves what is alive at the
start out of the collector's sight (the run's own cycles are still collected); `gc.unfreeze()` at the end gives them
back, so that a notebook's model or anything else dropped later is collected as before.
"""

import contextlib
import gc


@contextlib.contextmanager
def earlier_objects_frozen():
    if gc.get_freeze_count():  # the caller froze objects already: theirs to unfreeze, not the run's
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
