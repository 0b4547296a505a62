"""TrainConfig's options grouped by concern: each part of the package is handed the group it reads, not every option.

`TrainConfig` stays one flat dataclass: train.py's flags, the notebook's fields, the report and a checkpoint's
settings.json are its flat names, unchanged. Each group below is a frozen slice of it with the same field names
(`config.data`, `config.model`, ...: train_config.py), made from the config's current values when asked. Every option
is in exactly one group (tests/test_config_groups.py). What is refused is still refused by TrainConfig's checks
(checks.py), once, as it is made: a group checks nothing.
"""

from dataclasses import dataclass, fields
from pathlib import Path

from .defaults import LORA_DROPOUT


@dataclass(frozen=True)
class DataOptions:
    """data/: where the examples come from, their columns and how a text becomes a row of tokens."""

    demo: bool | None
    dataset: str
    train_file: str | None
    eval_file: str | None
    text_column: str | None
{%- if cookiecutter.task != "causal-lm" %}
    text_pair_column: str | None
    label_column: str
    num_labels: int
{%- endif %}
    max_seq_length: int
    padding: str
    max_train_examples: int | None
    preprocessing_num_workers: int | None
{%- if cookiecutter.task == "causal-lm" %}
    streaming: bool
{%- endif %}


@dataclass(frozen=True)
class ModelOptions:
    """models/: which model, and what is trained of it (LoRA) and kept of its activations."""

    model_name_or_path: str
    gradient_checkpointing: bool
    lora_r: int | None
    lora_alpha: float | None
    lora_dropout: float | None
    lora_target_modules: str | None
    merge_lora: bool
    lora_frozen_float32: bool

    def frozen_in_bf16(self, level: str) -> bool:
        """Whether the frozen base is held in bf16 (models/lora.py, frozen_to_bf16): with LoRA under bf16 autocast (level
        "bf16"), unless asked not to. Under autocast every matmul reads its weight in bf16 anyway; what changes is
        what is not a matmul (the embedding's rows, the norms' scales, the biases) and half the base's bytes."""
        return self.lora_r is not None and level == "bf16" and not self.lora_frozen_float32

    @property
    def resolved_lora_alpha(self) -> float:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_r

    @property
    def resolved_lora_dropout(self) -> float:
        return self.lora_dropout if self.lora_dropout is not None else LORA_DROPOUT


@dataclass(frozen=True)
class OptimizerOptions:
    """The optimizer and its schedule (loop/optimizers.py, transformers' get_scheduler), clipping included."""

    optim: str
    learning_rate: float | None
    weight_decay: float
    lr_scheduler_type: str
    warmup_ratio: float
    warmup_steps: int
    max_grad_norm: float


@dataclass(frozen=True)
class PrecisionOptions:
    """precision/: the level a run asks for."""

    mixed_precision: str | None
    pure_bf16: str | None
    kahan_summation: bool


@dataclass(frozen=True)
class ParallelismOptions:
    """parallel/: which layout, and what it shards."""

    parallelism: str
    fsdp_layer_class: str | None


@dataclass(frozen=True)
class CheckpointOptions:
    """fault_tolerance/ and the export: the output folder, checkpoints, resuming, the exported model and the report."""

    output_dir: str
    report: str | None
    resume: bool
    overwrite_output_dir: bool
    checkpoint: bool
    save_steps: int | None
    save_minutes: float | None
    keep_checkpoints: int
    export: bool

    @property
    def export_dir(self) -> Path:
        return Path(self.output_dir) / "model"

    @property
    def report_path(self) -> Path:
        return Path(self.report) if self.report else Path(self.output_dir) / "report.json"


@dataclass(frozen=True)
class WatchOptions:
    """watch/: the metrics log and its trackers, the profile, the compilations watched, cached and limited."""

    logging_steps: int
    report_to: str
    profile_steps: str | None
    watch_compilations: bool
    max_recompilations: int | None
    compilation_cache: bool


@dataclass(frozen=True)
class TrainingOptions:
    """The run's length, batches and seed, and how a step reaches XLA (step_function.py)."""

    seed: int
    num_epochs: int
    max_steps: int | None
    train_batch_size: int | None
    gradient_accumulation_steps: int
    step_function: str
    steps_per_execution: str


@dataclass(frozen=True)
class EvaluationOptions:
    """When the run evaluates and with what batch, which evaluation is the best and when it stops improving."""

    eval_batch_size: int
    eval_steps: int | None
    metric_for_best_model: str
    load_best_model_at_end: bool
    early_stopping_patience: int | None
{%- if cookiecutter.task == "causal-lm" %}
    samples: int
{%- endif %}


# By the name of TrainConfig's attribute that hands each out.
GROUPS = {
    "data": DataOptions, "model": ModelOptions, "optimizer": OptimizerOptions, "precision": PrecisionOptions,
    "parallel": ParallelismOptions, "checkpoints": CheckpointOptions, "watch": WatchOptions,
    "training": TrainingOptions, "evaluation": EvaluationOptions,
}


def slice_of(config, group: type):
    """The group `group` of `config` (a TrainConfig, or anything with its fields), from its current values."""
    return group(**{option.name: getattr(config, option.name) for option in fields(group)})


class _Slice:
    """A read-only attribute of TrainConfig: its group, made from the config's current values each time it is read."""

    def __init__(self, group: type):
        self.group = group

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, config, owner=None):
        return self if config is None else slice_of(config, self.group)

    def __set__(self, config, value) -> None:
        raise AttributeError(f"{self.name} is read-only: set the option itself (config.<option> = value)")


# TrainConfig's base: one attribute per group of GROUPS (not dataclass fields: no flag, notebook field or setting).
Grouped = type("Grouped", (), {name: _Slice(group) for name, group in GROUPS.items()})
