"""What every model needs, whatever the task: graph-friendly attention and activation checkpointing that works on XLA.

The task (tasks/) builds the model, on the host (CPU) only; in a notebook that runs once in the parent
process and the model is handed to every forked worker. hub.py says in one line when a model cannot be loaded.
"""

from transformers import AttentionMaskInterface
from transformers.masking_utils import eager_mask

# Eager attention (bf16 stays bf16 in its matmuls; PyTorch's SDPA math path computes them in float32),
# with its mask always built in the graph. transformers 5.24 decides whether it may skip a padding mask by
# reading it on the host (`padding_mask.all()` in masking_utils): on XLA a device-to-host transfer and a
# wait in every forward pass. Skipping saves nothing for eager attention, so the eager mask is registered
# again, through transformers' own interface, with that check off (for every model in this process).
ATTENTION = "eager"


def _eager_mask_in_graph(*args, **kwargs):
    return eager_mask(*args, **{**kwargs, "allow_is_bidirectional_skip": False})


AttentionMaskInterface.register(ATTENTION, _eager_mask_in_graph)


def use_graph_friendly_attention(model):
    """Switch a model built elsewhere (a notebook cell) to the attention this project relies on."""
    if getattr(model.config, "_attn_implementation", ATTENTION) != ATTENTION and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTENTION)
    return model


def enable_gradient_checkpointing(model):
    """Recompute each layer's activations in the backward pass (transformers' activation checkpointing).

    transformers binds each layer's keyword arguments itself and calls `_gradient_checkpointing_func` per layer;
    its default, torch.utils.checkpoint, fails on XLA (it looks up a `torch.xla` device module), so on XLA that
    function is torch_xla's checkpoint, whose optimization barriers keep XLA from undoing the recomputation.
    """
    model.activation_checkpointing_enable()
    from .environment import xla_installed

    if xla_installed():
        from torch_xla.utils.checkpoint import checkpoint

        for module in model.modules():
            if hasattr(module, "_gradient_checkpointing_func"):
                module._gradient_checkpointing_func = checkpoint
    return model

