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
from dataclasses import dataclass, replace

# Bytes the backward pass finds kept, per layer and token: PER_WIDTH x (hidden + feed-forward width) + PER_SCORE x
# heads x length, by compute dtype; and per logit of a language model's output, LOGIT_BYTES (float32 logits and
# what the loss keeps of them). Fitted to libtpu 0.0.21's peaks for Qwen2.5-0.5B (2 and 24 layers, 8 to 32 x 128,
# bf16 autocast): 44.7 KB a layer and token, 10.0 bytes a logit.
PER_WIDTH = {"bf16": 6.5, "fp32": 13.0}
PER_SCORE = {"bf16": 4.0, "fp32": 4.0}
LOGIT_BYTES = {"bf16": 10.0, "fp32": 10.0}


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

    @classmethod
    def of(cls, config, per_chip_batch: int, level: str, layout: str, task_name: str) -> "Recipe":
        """A run's recipe: its flags (TrainConfig), per-chip batch, precision level and layout."""
        return cls(per_chip_batch=per_chip_batch, length=config.max_seq_length, level=level, layout=layout,
                   optimizer=config.optim, kahan_summation=config.kahan_summation,
                   gradient_checkpointing=config.gradient_checkpointing, causal_lm=task_name == "causal-lm")

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
        weights += numel * recipe.weight_bytes
        if not parameter.requires_grad:
            continue
        gradients += numel * recipe.weight_bytes
        if recipe.optimizer == "adafactor":
            # transformers' Adafactor: a row and a column of float32 second moments per matrix, no first moment.
            optimizer += 4 * ((rows + math.prod(shape[1:])) if len(shape) >= 2 else numel)
        else:
            # AdamW's two moments in the weight's dtype; optimi's Kahan summation keeps one more buffer.
            optimizer += numel * recipe.weight_bytes * (3 if recipe.kahan_summation else 2)
    return {"weights": weights, "gradients": gradients, "optimizer_state": optimizer}


def activation_bytes(config, recipe: Recipe, per_chip_batch: int | None = None, checkpointing: bool | None = None) -> int:
    """What the forward pass keeps for the backward one, per chip, at this batch."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    rows = recipe.per_chip_batch if per_chip_batch is None else per_chip_batch
    checkpointing = recipe.gradient_checkpointing if checkpointing is None else checkpointing
    tokens = rows * recipe.length
    hidden, layers = config.hidden_size, config.num_hidden_layers
    feed_forward = getattr(config, "intermediate_size", None) or 4 * hidden
    layer = tokens * (PER_WIDTH[recipe.compute] * (hidden + feed_forward)
                      + PER_SCORE[recipe.compute] * config.num_attention_heads * recipe.length)
    # Checkpointed: each layer's input (the residual stream, float32 unless the weights are bf16) and one layer.
    kept = layers * layer if not checkpointing else layers * tokens * hidden * recipe.weight_bytes + layer
    logits = tokens * config.vocab_size * LOGIT_BYTES[recipe.compute] if recipe.causal_lm else 0
    return int(kept + logits)


def memory(model, recipe: Recipe, chips: int) -> dict:
    """{"peak_bytes", "parts"}: the estimate of a step's peak per chip and what it is made of. The weights and the
    optimizer state are there throughout; the activations and the full set of gradients each at their own moment."""
    parts = state_bytes(model, recipe, chips)
    parts["activations"] = activation_bytes(model.config, recipe)
    peak = parts["weights"] + parts["optimizer_state"] + max(parts["gradients"], parts["activations"])
    return {"peak_bytes": peak, "parts": parts}


def largest_batch(model, recipe: Recipe, chips: int, usable_bytes: int) -> int:
    """The largest per-chip batch whose estimate fits in `usable_bytes` (0: not even one example)."""
    state = state_bytes(model, recipe, chips)
    room = usable_bytes - state["weights"] - state["optimizer_state"]
    if room < state["gradients"]:
        return 0
    one = activation_bytes(model.config, recipe, per_chip_batch=1)
    return max(0, int(room // max(one, 1)))


# The estimate's largest distance from the TPU compiler's peak over the benchmark group's rows ("plan against the
# TPU compiler"): a run stops before compiling only when its estimate exceeds the chip by more than this.
MEASURED_ERROR = 0.15


def check_at_start(model, recipe: Recipe, chips: int, device_bytes: int | None) -> tuple[str, str | None]:
    """(the line a run prints before it compiles, why it must stop or None).

    It stops when the estimate exceeds the chip's memory by more than MEASURED_ERROR, naming what would fit.
    """
    from .targets import CHIPS, GIB

    peak = memory(model, recipe, chips)["peak_bytes"]
    if device_bytes is None:
        return f"plan: {peak / GIB:.2f} GiB per chip (estimate; this device reports no memory to check it against)", None
    line = f"plan: {peak / GIB:.2f} GiB per chip (estimate) of the {device_bytes / GIB:.2f} GiB the device offers"
    if peak <= device_bytes * (1 + MEASURED_ERROR):
        return line, None
    would_fit = []
    batch = largest_batch(model, recipe, chips, device_bytes)
    if batch:
        would_fit.append(f"--train_batch_size {batch}")
    if recipe.layout == "data" and chips > 1 and memory(model, replace(recipe, layout="fsdp"), chips)["peak_bytes"] <= device_bytes:
        would_fit.append("--parallelism fsdp")
    if not recipe.gradient_checkpointing and \
            memory(model, replace(recipe, gradient_checkpointing=True), chips)["peak_bytes"] <= device_bytes:
        would_fit.append("--gradient_checkpointing")
    larger = [chip.generation for chip in CHIPS.values() if chip.usable_hbm_bytes >= peak]
    if larger:
        would_fit.append(f"a chip with more memory ({', '.join(larger)})")
    return line, (f"train_batch_size={recipe.per_chip_batch}: the step needs about {peak / GIB:.2f} GiB per chip, "
                  f"more than the {device_bytes / GIB:.2f} GiB this device offers (python plan.py --help); "
                  f"what would fit: {'; '.join(would_fit) or 'a smaller model'}")
