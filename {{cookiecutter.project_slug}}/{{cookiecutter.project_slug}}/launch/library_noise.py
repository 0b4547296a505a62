"""Library warnings that tell a user of this project nothing they can act on, silenced in one place.

Each entry names where it comes from and why it is noise here. Anything else still shows.
"""

import warnings

NOISE = (
    # torch.distributed.checkpoint, when fsdp saves or loads its shards in one process (one host): that is the intent.
    r"torch\.distributed is disabled, unavailable or uninitialized, assuming the intent is to (save|load) in a single",
    # torch, about torch_xla 2.9's SPMDSavePlanner (its set_up_planner predates the storage_meta argument).
    r"The function definition for SavePlanner\.set_up_planner has been updated",
    # torch's own filesystem writer of torch.distributed.checkpoint calls tensor.storage().
    r"TypedStorage is deprecated",
    # torch_xla 2.9's xla_sharded_tensor.py (its shard's unpadded indices), read at each sharded save.
    r"Using a non-tuple sequence for multidimensional indexing is deprecated",
    # torch, about the optimization barrier torch_xla's FSDPv2 hooks onto the outermost wrapper: a transformers model
    # returns a ModelOutput, so torch skips that one hook; the per-layer wrappers (tuples out) keep theirs.
    r"For backward hooks to be called, module output should be a Tensor or a tuple of Tensors",
)


def silence() -> None:
    for message in NOISE:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
