"""What every model needs, whatever the task: graph-friendly attention, no KV cache, and activation checkpointing
that works on XLA.

The task (tasks/) builds the model, on the host (CPU) only; in a notebook that runs once in the parent
process and the model is handed to every forked worker. hub.py says in one line when a model cannot be loaded.
"""

import types

from transformers import AttentionMaskInterface
from transformers.masking_utils import eager_mask

from ..config import ATTENTION, ConfigError
from ..xla import checkpoint as xla_checkpoint
from ..xla import hub_kernels, runtime

# Eager attention (bf16 stays bf16 in its matmuls; PyTorch's SDPA math path computes them in float32),
# with its mask always built in the graph. transformers 5.24 decides whether it may skip a padding mask by
# reading it on the host (`padding_mask.all()` in masking_utils): on XLA a device-to-host transfer and a
# wait in every forward pass. Skipping saves nothing for eager attention, so the eager mask is registered
# again, through transformers' own interface, with that check off (for every model in this process).


def _eager_mask_in_graph(*args, **kwargs):
    return eager_mask(*args, **{**kwargs, "allow_is_bidirectional_skip": False})


AttentionMaskInterface.register(ATTENTION, _eager_mask_in_graph)


def make_graph_friendly(model):
    """Make any model (the task's, a folder's, a notebook cell's) train in the graphs this project relies on.

    The attention above, and no KV cache: a decoder's config says use_cache=True (for generation), and transformers
    then builds a cache in every forward pass, training and evaluation alike: work and memory for nothing when every
    forward sees the whole block, and Mistral's sliding-window cache (cache_utils) fails at the first step on XLA.
    (The exported config says use_cache=false too; generate() reads it from the generation_config.json saved beside.)

    And a sequence classifier's loss said to be single-label classification (the project's labels are whole numbers):
    left unset, DeBERTa-v2's head keeps only the rows with a label >= 0 through `(labels >= 0).nonzero()` and branches
    on how many there are, a device-to-host read in every step and a graph of its own (transformers 5.24).

    And tied weights that stay tied on the device (_keep_tied_weights_tied).

    And a mixture of experts' experts as batched matrix products: transformers 5 runs them by default through
    torch._grouped_mm (experts_implementation "grouped_mm"), which has no XLA lowering ("Operator with name
    aten::_grouped_mm has no lowering", plan.py --compile on Mixtral), and its "eager" form loops over the experts each
    token picked, a shape that changes every batch; "batched_mm" gathers each token's experts: fixed shapes.

    And, where torch_xla is installed, transformers' hub kernels off (xla/hub_kernels.py): from transformers 5.25 a
    pretrained model's first train() on XLA fails in them.
    """
    if runtime.installed():
        hub_kernels.turn_off(model)
    if getattr(model.config, "_attn_implementation", ATTENTION) != ATTENTION and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTENTION)
    for config in _configs(model):
        config.use_cache = False
    if type(model).__name__.endswith("ForSequenceClassification") and model.config.num_labels > 1:
        model.config.problem_type = model.config.problem_type or "single_label_classification"
    _keep_tied_weights_tied(model)
    if hasattr(model, "get_experts_implementation") and "grouped_mm" in str(model.get_experts_implementation()):
        model.set_experts_implementation("batched_mm")
    return model


def _keep_tied_weights_tied(model) -> None:
    """Tie the model's tied weights (GPT-2's, Gemma's input embedding and output head) again after every move.

    torch's Module._apply cannot swap a CPU parameter's storage for an XLA tensor, so `model.to(xla)` makes a new
    Parameter for each module that holds one: a weight two modules share becomes two, and the layouts trained them
    apart (a tiny GPT-2 on the demo ended at eval loss 4.40 with data, 3.88 with fsdp, 4.00 on the plain CPU; tied
    again, 4.00 in both). torch_xla's own advice is to tie the weights again after moving the model: done here on
    every move, whoever moves it (Accelerate, the fsdp wrapping, a notebook cell).
    """
    if getattr(model, "all_tied_weights_keys", None) and "_apply" not in vars(model):
        model._apply = types.MethodType(_apply, model)  # a bound method: a deep copy of the model binds its own


def _apply(self, *args, **kwargs):
    """Module._apply (which `.to()` calls), then the ties again."""
    moved = type(self)._apply(self, *args, **kwargs)
    self.tie_weights(recompute_mapping=False)
    return moved


def _configs(model):
    """The model's config and its text model's (a multimodal config nests one), where they have a cache switch."""
    config = model.config
    for found in (config, getattr(config, "get_text_config", lambda: None)()):
        if found is not None and hasattr(found, "use_cache"):
            yield found


def check_positions(model, max_seq_length: int) -> None:
    """Refuse a max_seq_length past the positions the model's config declares (max_position_embeddings; GPT-2's
    n_positions answers to that name too), before anything compiles.

    A learned position table (BERT, GPT-2) read past its end is no error on XLA: the gather clamps to its last row
    (torch on the CPU raises an IndexError), and a run trained on garbage and exited 0. A rotary model (Llama, Qwen)
    computes any position, but past its declared limit it was never trained (transformers' run_clm caps its block
    size at that limit for the same reason).
    """
    limit = getattr(model.config, "max_position_embeddings", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and max_seq_length > limit:
        raise ConfigError(
            f"max_seq_length={max_seq_length}: past the {limit} positions this model declares "
            f"(max_position_embeddings in its config): lower --max_seq_length to {limit} or less"
        )


def model_facts(model) -> dict:
    """What the report says of the model: its class, its type, and whether its forward passes build a KV cache
    (false for training here; an encoder has none)."""
    config = model.config
    return {
        "architecture": type(model).__name__, "model_type": getattr(config, "model_type", None),
        "use_cache": bool(getattr(config, "use_cache", False)),
    }


def enable_gradient_checkpointing(model):
    """Recompute each layer's activations in the backward pass (transformers' activation checkpointing).

    transformers binds each layer's keyword arguments itself and calls `_gradient_checkpointing_func` per layer;
    its default, torch.utils.checkpoint, fails on XLA (it looks up a `torch.xla` device module), so on XLA that
    function is torch_xla's checkpoint, whose optimization barriers keep XLA from undoing the recomputation.
    """
    model.activation_checkpointing_enable()
    if runtime.installed():
        checkpoint = xla_checkpoint.activation_checkpoint()
        for module in model.modules():
            if hasattr(module, "_gradient_checkpointing_func"):
                module._gradient_checkpointing_func = checkpoint
    return model

