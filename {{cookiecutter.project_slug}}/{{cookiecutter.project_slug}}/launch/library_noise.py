"""Library warnings that tell a user of this project nothing they can act on, silenced in one place.

Each entry names where it comes from and why it is noise here. Anything else still shows.
"""

import logging
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

# Logged, not warned, as the JAX step's libraries load (xla/jax_step.py): (logger, words of the message).
LOGGED_NOISE = (
    # orbax, which flax imports: it would read gs:// paths through TensorFlow; this project reads none.
    ("absl", "Tensorflow library not found, tensorflow.io.gfile operations will use native shim calls"),
    # torchax, torch_xla's JAX bridge, registers one of its operators twice as it loads.
    ("root", "Duplicate op registration for aten.__and__"),
)


class _Unless(logging.Filter):
    def __init__(self, words: str):
        super().__init__()
        self.words = words

    def filter(self, record) -> bool:
        return self.words not in record.getMessage()


def silence() -> None:
    for message in NOISE:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    for logger, words in LOGGED_NOISE:
        logging.getLogger(None if logger == "root" else logger).addFilter(_Unless(words))
