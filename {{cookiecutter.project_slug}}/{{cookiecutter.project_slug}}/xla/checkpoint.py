"""torch_xla's two checkpoints: planners for torch.distributed.checkpoint of SPMD-sharded tensors, and
activation checkpointing (recomputation) that XLA keeps.
"""


def save_planner():
    """Plans a save of SPMD-sharded tensors: each host writes the shards its own chips hold."""
    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    return SPMDSavePlanner()


def load_planner():
    """Plans a load into live SPMD-sharded tensors: each chip reads only the ranges of its own shards."""
    from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner

    return SPMDLoadPlanner()


def prime_optimizer(optimizer) -> None:
    """Create the optimizer's state (a checkpoint is loaded into existing tensors, so they must exist first)."""
    from torch_xla.experimental.distributed_checkpoint import prime_optimizer as prime

    prime(optimizer)


def activation_checkpoint():
    """The function transformers calls per layer to recompute it in the backward pass.

    torch.utils.checkpoint fails on XLA (it looks up a `torch.xla` device module); torch_xla's checkpoint
    puts optimization barriers around the recomputation, so that XLA does not undo it.
    """
    from torch_xla.utils.checkpoint import checkpoint

    return checkpoint
