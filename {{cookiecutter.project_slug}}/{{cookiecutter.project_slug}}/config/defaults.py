"""The defaults a run starts from: the answers given when the template was baked, and the choices each option allows."""

from dataclasses import field
from pathlib import Path

from .errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # <project>/<package>/config/defaults.py
{%- if cookiecutter.task == "causal-lm" %}
DEMO_DATA_DIR = PROJECT_ROOT / "data" / "demo-lm"  # written by the template's tools/make_lm_demo_text.py
{%- else %}
DEMO_DATA_DIR = PROJECT_ROOT / "data" / "demo"
{%- endif %}
DEFAULT_MODEL = {{ cookiecutter.model_name_or_path | tojson }}
{%- if cookiecutter.task == "causal-lm" %}
DEFAULT_DATASET = "wikitext/wikitext-2-raw-v1"
# The ways a batch is laid out (tasks/causal_lm.py): packed blocks, one shape (fixed); a text per row, all padded
# to the longest (longest); a text per row padded per batch (dynamic: recompiles, kept to measure it).
PADDING_MODES = ("fixed", "longest", "dynamic")
{%- else %}
DEFAULT_DATASET = "glue/mrpc"
PADDING_MODES = ("fixed", "buckets", "dynamic")
{%- endif %}
# Where bf16 weights live (precision/levels.py): float32 (no), or bf16 through XLA_USE_BF16, XLA_DOWNCAST_BF16 or a cast.
PURE_BF16_CHOICES = ("no", "xla", "downcast", "cast")
# Learning-rate schedules (transformers' get_scheduler names); linear, without warm-up, is transformers' Trainer's default.
SCHEDULES = ("linear", "cosine", "constant", "constant_with_warmup")
# Optimizers (loop/optimizers.py): the project's AdamW (adamw.py), or transformers' Adafactor (factored: fewer bytes).
OPTIMIZERS = ("adamw", "adafactor")
# How a training step reaches XLA (loop/step.py): traced op by op every step (lazy), or one JAX function traced once
# (jax: xla/jax_step.py, needs jax; the default AdamW without accumulation, one process per host); auto, the default,
# takes jax wherever it can run and says why where it cannot (config/step_function.py).
STEP_FUNCTIONS = ("auto", "jax", "lazy")
# --metric_for_best_model: the eval metrics a best evaluation is chosen by (eval_ prefix allowed), each with whether a
# greater value is better (transformers derives it from a name ending in "loss"; a perplexity is lower-is-better too).
{%- if cookiecutter.task == "causal-lm" %}
BEST_METRICS = {"loss": False, "perplexity": False}
{%- else %}
BEST_METRICS = {"loss": False, "accuracy": True, "macro_f1": True, "roc_auc": True}
{%- endif %}
TRACKERS = ("tensorboard", "wandb", "trackio", "none")  # --report_to: Accelerate's trackers of these names
# A from-scratch model learns the demo at a much higher rate than a pretrained one is fine-tuned at.
DEMO_LEARNING_RATE = 1e-3
TRAIN_BATCH_SIZE = {{ cookiecutter.train_batch_size }}  # per chip, the bake's answer
# --eval_batch_size's default: None is the run's own train batch per chip, whatever --train_batch_size says (the seed's
# advice: an evaluation as large as the step fits where the step does; a Llama-3.1-8B rehearsal at 4 x 1,024 a chip ran
# out of a v5e's memory in its evaluation at the bake's 16). A number only where the bake was asked for another size.
EVAL_BATCH_SIZE = {% if cookiecutter.eval_batch_size|int != cookiecutter.train_batch_size|int %}{{ cookiecutter.eval_batch_size }}{% else %}None{% endif %}
# The demo's global batch, split over the chips: its schedule (steps, learning rate) is the same on one chip and on
# eight, so it learns the same. At 16 per chip a v5e-8's global batch of 128 would give the demo 3 steps an epoch.
DEMO_GLOBAL_BATCH = 16
LORA_DROPOUT = 0.05  # the default dropout on LoRA adapters' input (--lora_dropout)
# LoRA adapters (B starting at zero, a few parameters per layer) are trained at about ten times full fine-tuning's
# rate (peft's and TRL's LoRA examples use 1e-4 to 2e-4 where full fine-tuning uses 1e-5 to 2e-5): at the full
# fine-tuning rate they barely move in a short run.
LORA_LEARNING_RATE_FACTOR = 10


def switch(default: bool | None, help: str):
    """A boolean option: `--name` alone means true, `--name true|false` works too (as on Accelerate's launcher).

    HfArgumentParser does that by itself for `bool` fields, not for `bool | None` ones (None: decided at
    run time), which would otherwise demand a value.
    """
    metadata = {"help": f"{help} true or false; the flag alone means true."}
    if default is None:
        metadata.update(nargs="?", const=True)
    return field(default=default, metadata=metadata)

# Every model is built with eager attention; models/modeling.py makes its mask graph-friendly on XLA.
ATTENTION = "eager"


class ConfigError(UserError, ValueError):
    """A configuration value that cannot work; the message names the field."""


PARALLELISMS = ("data", "fsdp")  # parallel/: one module each
