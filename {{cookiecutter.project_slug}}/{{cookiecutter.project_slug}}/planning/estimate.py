"""What a training step needs per chip, from the model's shape alone (the meta device: no weight is read), in seconds.

The state is counted exactly: weights, gradients and optimizer state, each in the dtype the precision level keeps it,
split over the chips under fsdp (each weight along its first dimension, as FSDPv2 splits it). Activations are a
formula fitted to the TPU compiler's own answers (xla/tpu_compile.py; the benchmark group "plan against the TPU
compiler" measures its error): per layer and token, bytes for the hidden and feed-forward widths and the attention
scores; at the output, what a language model's loss keeps of its logits. With gradient checkpointing each layer's
input is kept and one layer's activations live at a time.

The peak is not the parts' sum. The backward pass frees the activations as it makes the gradients, and clipping
needs every gradient before the first update, so the compiler's peak comes at one of two moments: the backward
pass's start (weights, moments and the activations) or the clip (weights, moments and every gradient). Qwen2.5-0.5B
at 8 and 16 x 128 on a v5e chip: the compiler's peak was the weights and moments plus 331.8 MB an example, the
activations, through the origin; its gradients (1.84 GiB) never showed.
"""

import math
from dataclasses import dataclass

# Bytes the backward pass finds kept, per layer and token: PER_WIDTH x (hidden + feed-forward width), by compute
# dtype; with dropout, DROPOUT_BYTES x (heads x length + hidden) more for its masks; and per logit of a language
# model's output, LOGIT_BYTES (float32 logits and what the loss keeps of them). Fitted to libtpu 0.0.21's peaks on one
# v5e chip at 8 to 32 x 128 a chip. Per layer and token: bert-base-cased 24.7 KB in bf16 autocast with its dropout
# off, 34.8-36.2 KB with it, 41.6-42.6 KB in float32; Qwen2.5-0.5B (no dropout) 44.7 KB and 60.7 KB; its logits
# 10.0 bytes each (2 and 24 layers apart). One width coefficient for both models is 9 % off each in bf16.
PER_WIDTH = {"bf16": 7.1, "fp32": 9.4}
DROPOUT_BYTES = 4.4
LOGIT_BYTES = {"bf16": 10.0, "fp32": 10.0}
# Under fsdp the partitioner draws dropout's random bits for more than each chip's share of the global batch:
# bert-base-cased on 4 v5e chips kept FSDP_DROPOUT_COPIES of one chip's masks more, as well as each chip's. And it
# gathers a split weight whole before the matmul or look-up that reads it: the largest one's full bytes count once.
FSDP_DROPOUT_COPIES = 1.45
# Near a chip's capacity libtpu's compiler recomputes activations instead of keeping them (rematerialization): it
# brings the peak down to REMAT_TARGET of the chip's usable memory where it can, recomputing at most REMAT_SHARE of
# the activations. Qwen2.5-0.5B on one v5e (15.75 GiB usable): at 32 x 128 the compiler kept 12.63 GiB (80.2 %; the
# count above gives 15.4), at 64 x 128 it needed 19.98 GiB (the count: 25.3 GiB, 27 % of the activations less).
REMAT_TARGET = 0.8
REMAT_SHARE = 0.27
# Attention's scores grow with the length squared: per layer, token and head, SCORE_BYTES for each position of the
# sequence past FITTED_LENGTH (the coefficients above were fitted at 128 tokens, where the scores are in PER_WIDTH's
# share). Fitted to two rows at 512 tokens (benchmarks/measure_plan.py's LENGTH_FITS): bert-base-cased at 8 x 512 on a
# v5e chip alone gave 3.2 bytes, distilbert-base-uncased at 16 x 512 over a v5p-8 5.3 (at 3.2 its estimate was 0.81
# of the compiler's peak, found as a check row and then made the second fit); between them, each row within 15 %.
# Checked on the matrix's other rows at 512 (docs/plan.md).
SCORE_BYTES = 4.2
FITTED_LENGTH = 128
# Past the longest length fitted, the scores' bytes grew faster still (ModernBERT-base at 4 x 2,048: the estimate
# with SCORE_BYTES was 0.74 of the compiler's peak): there the estimate gives no figure, and says to compile.
LONGEST_FITTED = 512


@dataclass(frozen=True)
class Recipe:
    """What of a run decides its memory and time per chip."""

    per_chip_batch: int
    length: int
    level: str  # precision/levels.py's: fp32, bf16, pure-bf16-xla, -downcast, -cast
    layout: str  # data or fsdp
    optimizer: str = "adamw"
    kahan_summation: bool = False
    gradient_checkpointing: bool = False
    causal_lm: bool = False
    frozen_bf16: bool = False  # LoRA's frozen base held in bf16 (config/groups.py, ModelOptions.frozen_in_bf16)

    @classmethod
    def of(cls, config, per_chip_batch: int, level: str, layout: str, task_name: str) -> "Recipe":
        """A run's recipe: its flags (TrainConfig), per-chip batch, precision level and layout."""
        return cls(per_chip_batch=per_chip_batch, length=config.max_seq_length, level=level, layout=layout,
                   optimizer=config.optim, kahan_summation=config.kahan_summation,
                   gradient_checkpointing=config.gradient_checkpointing, causal_lm=task_name == "causal-lm",
                   frozen_bf16=config.model.frozen_in_bf16(level))

    @property
    def weight_bytes(self) -> int:
        return 2 if self.level.startswith("pure-") else 4

    @property
    def compute(self) -> str:
        return "fp32" if self.level == "fp32" else "bf16"


def state_bytes(model, recipe: Recipe, chips: int) -> dict:
    """Weights, gradients and optimizer state per chip, in bytes."""
    shards = chips if recipe.layout == "fsdp" else 1
    weights = gradients = optimizer = 0
    seen = set()
    for parameter in model.parameters():  # a tied weight once
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        shape = tuple(parameter.shape)
        # FSDPv2 splits a weight's first dimension over the chips, a short last shard padded (XLA's uneven sharding).
        rows = -(-shape[0] // shards) if shape else 1
        numel = rows * math.prod(shape[1:])
        if not parameter.requires_grad:
            weights += numel * (2 if recipe.frozen_bf16 else recipe.weight_bytes)
            continue
        weights += numel * recipe.weight_bytes
        gradients += numel * recipe.weight_bytes
        if recipe.optimizer == "adafactor":
            # transformers' Adafactor: a row and a column of float32 second moments per matrix, no first moment.
            optimizer += 4 * ((rows + math.prod(shape[1:])) if len(shape) >= 2 else numel)
        else:
            # AdamW's two moments in the weight's dtype; optimi's Kahan summation keeps one more buffer.
            optimizer += numel * recipe.weight_bytes * (3 if recipe.kahan_summation else 2)
    return {"weights": weights, "gradients": gradients, "optimizer_state": optimizer}


def has_dropout(model_config) -> bool:
    """Any dropout probability above 0 in the model's config (BERT's hidden and attention dropout; Qwen2 has 0)."""
    settings = model_config.to_dict().items()
    return any("dropout" in key and isinstance(value, float) and value > 0 for key, value in settings)


def activation_bytes(model_config, recipe: Recipe, chips: int = 1, per_chip_batch: int | None = None,
                     checkpointing: bool | None = None) -> int:
    """What the forward pass keeps for the backward one, per chip, at this batch."""
    model_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    rows = recipe.per_chip_batch if per_chip_batch is None else per_chip_batch
    checkpointing = recipe.gradient_checkpointing if checkpointing is None else checkpointing
    tokens = rows * recipe.length
    hidden, layers = model_config.hidden_size, model_config.num_hidden_layers
    feed_forward = getattr(model_config, "intermediate_size", None) or 4 * hidden
    heads = model_config.num_attention_heads
    masks = DROPOUT_BYTES * (heads * recipe.length + hidden) if has_dropout(model_config) else 0
    if recipe.layout == "fsdp" and chips > 1:
        masks *= 1 + FSDP_DROPOUT_COPIES
    scores = SCORE_BYTES * heads * (recipe.length - FITTED_LENGTH)
    layer = tokens * max(PER_WIDTH[recipe.compute] * (hidden + feed_forward) + masks + scores, 0)
    # Checkpointed: each layer's input (the residual stream, float32 unless the weights are bf16) and one layer.
    kept = layers * layer if not checkpointing else layers * tokens * hidden * recipe.weight_bytes + layer
    logits = tokens * model_config.vocab_size * LOGIT_BYTES[recipe.compute] if recipe.causal_lm else 0
    return int(kept + logits)


def gathered_bytes(model, recipe: Recipe, chips: int) -> int:
    """Under fsdp on several chips, the largest weight gathered whole (embeddings, a language model's output)."""
    if recipe.layout != "fsdp" or chips == 1:
        return 0
    return max(parameter.numel() for parameter in model.parameters()) * recipe.weight_bytes


def activations(model, recipe: Recipe, chips: int, checkpointing: bool | None = None) -> int:
    """The activations at the run's batch, and under fsdp the weight gathered whole beside them."""
    return activation_bytes(model.config, recipe, chips, checkpointing=checkpointing) + gathered_bytes(model, recipe, chips)


def no_formula(model_config, recipe: "Recipe | None" = None, chips: int = 1) -> str | None:
    """Why the activation formula does not cover this architecture or recipe, or None where it does: it counts an
    encoder's or a decoder's stack of attention and feed-forward layers (hidden_size, num_hidden_layers,
    num_attention_heads in its config), not an encoder-decoder's two stacks nor a mixture of experts' routed ones, at
    most LONGEST_FITTED tokens a sequence, and under fsdp with dropout at most FITTED_LENGTH (FSDP_DROPOUT_COPIES was
    fitted there; RoBERTa-large at 8 x 512 on v6e-4: --compile's peak was 1.9 times the estimate)."""
    if recipe is not None and recipe.length > LONGEST_FITTED:
        return (f"a sequence of {recipe.length} tokens, longer than any the estimate was fitted at ({LONGEST_FITTED}): "
                f"compile to know (--compile)")
    if recipe is not None and recipe.layout == "fsdp" and chips > 1 and recipe.length > FITTED_LENGTH and \
            has_dropout(model_config):
        return (f"dropout under fsdp at {recipe.length} tokens, longer than the {FITTED_LENGTH} its random bits were "
                f"fitted at: compile to know (--rehearse gives the run's own figure)")
    model_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    kind = getattr(model_config, "model_type", None) or type(model_config).__name__
    if getattr(model_config, "is_encoder_decoder", False):
        return f"{kind} is an encoder-decoder, which the estimate has no formula for: compile to know (--compile)"
    if any(getattr(model_config, name, None) for name in ("num_experts", "num_local_experts", "n_routed_experts")):
        return f"{kind} is a mixture of experts, which the estimate has no formula for: compile to know (--compile)"
    missing = [name for name in ("hidden_size", "num_hidden_layers", "num_attention_heads")
               if not isinstance(getattr(model_config, name, None), int)]
    if missing:
        return f"{kind}'s config names no {', '.join(missing)}, which the estimate counts by: compile to know (--compile)"
    return None


def memory(model, recipe: Recipe, chips: int, usable_bytes: int | None = None) -> dict:
    """{"peak_bytes", "parts", "recomputed"}: the estimate of a step's peak per chip and what it is made of. The weights
    and the optimizer state are there throughout; the activations and the full set of gradients each at their own
    moment. On a chip of `usable_bytes`, near its capacity, less: the compiler recomputes activations (REMAT_*).
    Where the formula has nothing to count by (no_formula), the peak is None and "why" says so; the state is exact."""
    parts = state_bytes(model, recipe, chips)
    if why := no_formula(model.config, recipe, chips):
        return {"peak_bytes": None, "why": why, "parts": {**parts, "activations": None}, "recomputed": None}
    parts["activations"] = activations(model, recipe, chips)
    state = parts["weights"] + parts["optimizer_state"]
    kept = state + max(parts["gradients"], parts["activations"])
    peak = kept
    if usable_bytes and kept > REMAT_TARGET * usable_bytes:
        least = state + max(parts["gradients"], int(parts["activations"] * (1 - REMAT_SHARE)))
        peak = max(least, min(kept, int(REMAT_TARGET * usable_bytes)))
    return {"peak_bytes": peak, "parts": parts, "recomputed": kept - peak}


def step_bytes(parts: dict) -> int | None:
    """The bytes a step moves through HBM at the least, counted: the weights, gradients, optimizer state and activations
    each written once and read once (a roofline's bytes where the compiler's are not known)."""
    if parts["activations"] is None:
        return None
    return 2 * (parts["weights"] + parts["gradients"] + parts["optimizer_state"] + parts["activations"])


def largest_batch(model, recipe: Recipe, chips: int, usable_bytes: int) -> int | None:
    """The largest per-chip batch whose estimate fits in `usable_bytes` (0: not even one example): its activations,
    less what the compiler may recompute, beside the state. None where the formula has nothing to count by."""
    if no_formula(model.config, recipe, chips):
        return None
    state = state_bytes(model, recipe, chips)
    room = usable_bytes - state["weights"] - state["optimizer_state"]
    if room < state["gradients"]:
        return 0
    # memory(): at the least, (activations(batch) + gathered) x (1 - REMAT_SHARE) beside the state.
    one = activation_bytes(model.config, recipe, chips, per_chip_batch=1)
    return max(0, int((room / (1 - REMAT_SHARE) - gathered_bytes(model, recipe, chips)) // max(one, 1)))
