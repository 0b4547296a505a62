"""Model FLOPs utilisation (MFU): the FLOPs the model needs per token, those a chip achieved, and their share of the
chip's peak, the figure TPU users compare runs by (torchprime and MaxText report it).

Model FLOPs per token, the formula of the PaLM paper (Chowdhery et al. 2022, appendix B): 6N + 12·L·H·Q·T, where N
is the parameters that multiply activations (the embedding tables are looked up, not multiplied, unless the output
layer shares them), L the layers, H the attention heads, Q the head size and T the sequence length. 6N is 2N for the
forward pass and 4N for the backward (the activations' and the weights' gradients); 12·L·H·Q·T is attention's two
matrix products (scores and the weighted sum), forward and backward. A frozen weight gets no gradient of its own, so
under LoRA it counts 4N, not 6N. Model FLOPs leave out a layer recomputed by --gradient_checkpointing; a batch's
padding counts (its positions are computed).
"""

import os

import torch

from ..planning.targets import CHIPS

# Peak dense bf16 FLOP/s of one device (a chip; half a TPU7x chip): the plan's table of each generation (planning/targets.py).
# A TPU VM says its type in TPU_ACCELERATOR_TYPE (v5litepod-8).
PEAK_BF16_FLOPS = {generation: chip.peak_bf16_flops for generation, chip in CHIPS.items()}
TYPE_PREFIXES = (("v5litepod", "v5e"), ("v5e", "v5e"), ("v5p", "v5p"), ("v6e", "v6e"), ("v4", "v4"), ("tpu7x", "tpu7x"))


def model_flops_per_token(model, sequence_length: int) -> int:
    """The formula above for this model at this length (an encoder's or a decoder's: the same count)."""
    config = model.config
    embeddings = {id(module.weight) for module in model.modules() if isinstance(module, torch.nn.Embedding)}
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        embeddings.discard(id(output.weight))  # tied to the input table: multiplied, at the output
    frozen = trainable = 0
    for parameter in model.parameters():  # shared (tied) parameters once
        if id(parameter) in embeddings:
            continue
        if parameter.requires_grad:
            trainable += parameter.numel()
        else:
            frozen += parameter.numel()
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    head_size = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 6 * trainable + 4 * frozen + 12 * layers * heads * head_size * sequence_length


def chip_generation() -> str | None:
    """v4, v5e, v5p, v6e or tpu7x from TPU_ACCELERATOR_TYPE; None elsewhere (or for a type not in the table)."""
    accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "").lower()
    return next((generation for prefix, generation in TYPE_PREFIXES if accelerator.startswith(prefix)), None)


def utilisation(model, sequence_length: int | None, steady_examples_per_second: float | None, chips: int,
                device: str) -> dict:
    """The report's `flops`: per token, achieved per chip over the steady steps, and MFU where the chip is known."""
    if sequence_length is None:
        return {"why_no_mfu": "the batches have no one length (padding is not fixed): tokens per step vary"}
    per_token = model_flops_per_token(model, sequence_length)
    facts = {"model_flops_per_token": per_token, "formula": "6N + 12*L*H*Q*T (PaLM, appendix B); frozen weights 4N"}
    if not steady_examples_per_second:
        return {**facts, "why_no_mfu": "no steady step time: a run of one epoch has no epoch after its first"}
    achieved = per_token * sequence_length * steady_examples_per_second / chips
    facts["achieved_flops_per_second_per_chip"] = achieved
    generation = chip_generation() if device == "xla:TPU" else None
    if generation is None:
        why = f"no bf16 peak known for {device}" + (
            f" ({os.environ.get('TPU_ACCELERATOR_TYPE') or 'TPU_ACCELERATOR_TYPE unset'})" if device == "xla:TPU" else
            ": MFU is a TPU's figure")
        return {**facts, "why_no_mfu": why}
    return {**facts, "chip": generation, "peak_bf16_flops_per_chip": PEAK_BF16_FLOPS[generation],
            "mfu": achieved / PEAK_BF16_FLOPS[generation]}
