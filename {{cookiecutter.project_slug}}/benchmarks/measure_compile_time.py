"""Compile time at full layer count: the whole JAX step of the bake's default model compiled for one v5e chip by the
TPU's own compiler (xla/tpu_compile.py, libtpu, on this machine without a TPU), its layers as written against the
same step with its repeated layers scanned (xla/model_in_trace.scanned_layers: one layer's forward and backward
compiled, run for each layer's stacked weights).

A TPU compiles the step before its first step runs, and torch_xla 2.9's persistent cache does not spare it that
(pytorch/xla 9094): these seconds are what a run waits for, give or take the host. The `compile` profile builds the
model at its real size (Qwen2.5-0.5B's 24 layers, bert-base-cased's 12: minutes a row on two cores); the quick one
a narrowed model of 4 layers (seconds), which shows the rows compile, not what the real ones take. Each row compiles
afresh (no answer kept).
"""

import torch

from {{ cookiecutter.project_slug }}.config import DEFAULT_MODEL, TrainConfig
from {{ cookiecutter.project_slug }}.loop.optimizers import make_optimizer, parameter_groups
from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly

from .measure_plan import REAL_SHAPES

ROWS = ("layers as written", "layers scanned")
NARROWED = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 2,
            "num_key_value_heads": 2, "max_position_embeddings": 128}
TOPOLOGY = ("v5e:1x1", (1, 1, 1))  # one v5e chip: the data layout's weights whole on it, as on each chip of a slice
BATCH, LENGTH = 16, 128  # the bake's default per-chip batch and length


def default_model(narrowed: bool):
    """The bake's default model on the meta device (nothing allocated), at its real size or narrowed."""
    import transformers

    name, shape = REAL_SHAPES[DEFAULT_MODEL]
    config = getattr(transformers, name)(**{**shape, **(NARROWED if narrowed else {})})
    if name == "BertConfig":
        config.num_key_value_heads = None  # BERT has none; the narrowed shape names it for Qwen2
    with torch.device("meta"):
        return make_graph_friendly(transformers.AutoModelForCausalLM.from_config(config) if "Qwen" in name
                                   else transformers.AutoModelForSequenceClassification.from_config(config))


def measure(row: str, narrowed: bool) -> dict:
    """The row's compile for one v5e chip, bf16 autocast as the bake trains: seconds, peak memory, FLOPs."""
    from {{ cookiecutter.project_slug }}.xla.jax_step import step_inputs
    from {{ cookiecutter.project_slug }}.xla.tpu_compile import compile_step

    model = default_model(narrowed)
    length = 32 if narrowed else LENGTH
    config = TrainConfig()
    optimizer = make_optimizer("adamw", parameter_groups(model, config.weight_decay), 1e-5, config.weight_decay, False)
    group_of = {id(p): index for index, group in enumerate(optimizer.param_groups) for p in group["params"]}
    trainable, _ = step_inputs(model)
    batch = {"input_ids": ((BATCH, length), torch.int64), "attention_mask": ((BATCH, length), torch.int64),
             "labels": ((BATCH, length) if "Qwen" in DEFAULT_MODEL else (BATCH,), torch.int64)}
    compiled = compile_step(
        model, batch, topology=TOPOLOGY[0], chips_per_host_bounds=TOPOLOGY[1], shard_weights=False,
        autocast_dtype=torch.bfloat16, rows={name: group_of[id(p)] for name, p in trainable.items()},
        constants=tuple((*group["betas"], group["eps"]) for group in optimizer.param_groups),
        max_grad_norm=config.max_grad_norm, scan_layers=row == "layers scanned",
    )
    return {"model": DEFAULT_MODEL, "layers": model.config.num_hidden_layers, "narrowed": narrowed,
            "topology": TOPOLOGY[0], "batch": f"{BATCH}x{length}", "compile_seconds": compiled["compile_seconds"],
            "peak_gib": compiled["peak_bytes"] / 2 ** 30, "fits": compiled["fits"]}
