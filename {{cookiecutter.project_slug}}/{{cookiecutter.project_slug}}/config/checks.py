"""The checks a `TrainConfig` passes when it is made: each refusal is one line naming the field and what is allowed."""

from . import step_function
from .defaults import (
    BEST_METRICS,
    OPTIMIZERS,
    PADDING_MODES,
    PARALLELISMS,
    PURE_BF16_CHOICES,
    SCHEDULES,
    TRACKERS,
    ConfigError,
)


def check(config) -> None:
    """Refuse a value that cannot work, with one line naming the field and what is allowed."""
    for name in ({% if cookiecutter.task != "causal-lm" %}"num_labels", {% endif %}"train_batch_size", "gradient_accumulation_steps", "eval_batch_size", "max_seq_length", "num_epochs"):
        value = getattr(config, name)
        if value is None and name in ("train_batch_size", "eval_batch_size"):  # resolved per run (train_config.py)
            continue
        if not _whole(value, least=1):
            raise ConfigError(f"{name}={value!r}: must be a positive whole number")
{%- if cookiecutter.task == "causal-lm" %}
    if not _whole(config.samples, least=0):
        raise ConfigError(f"samples={config.samples!r}: must be 0 or a positive whole number")
    if config.streaming and config.max_steps is None:
        raise ConfigError("max_steps: streaming=True needs it (a stream has no length): give --max_steps")
    if config.streaming and config.padding != "fixed":
        raise ConfigError(f"padding={config.padding!r}: streaming=True packs blocks as it reads; use padding=fixed")
    if config.streaming and config.max_train_examples is not None:
        raise ConfigError("max_train_examples: a stream has no count of examples; with streaming=True, max_steps ends the run")
{%- endif %}
    for name in ("save_steps", "keep_checkpoints", "max_steps", "eval_steps", "preprocessing_num_workers"):
        value = getattr(config, name)
        if value is not None and not _whole(value, least=1):
            raise ConfigError(f"{name}={value!r}: must be a positive whole number")
    if not _whole(config.logging_steps, least=0):
        raise ConfigError(f"logging_steps={config.logging_steps!r}: must be 0 (no logs) or a positive whole number")
    if config.resume and config.overwrite_output_dir:
        raise ConfigError("resume=True and overwrite_output_dir=True: give one of the two (continue the earlier run, or remove it)")
    if config.report_to not in TRACKERS:
        raise ConfigError(f"report_to={config.report_to!r}: must be one of {', '.join(TRACKERS)}")
    if config.profile_steps is not None:
        first, dash, last = str(config.profile_steps).partition("-")
        if not (first.isdigit() and (not dash or last.isdigit()) and 1 <= int(first) <= int(last or first)):
            raise ConfigError(f"profile_steps={config.profile_steps!r}: must be A-B, the first and last optimizer step "
                              "to trace (1 <= A <= B), or A alone")
    if config.save_minutes is not None and not config.save_minutes > 0:
        raise ConfigError(f"save_minutes={config.save_minutes!r}: must be a positive number")
    if config.max_recompilations is not None and config.max_recompilations < 0:
        raise ConfigError(f"max_recompilations={config.max_recompilations!r}: must be 0 or more")
    if config.max_train_examples is not None and config.max_train_examples < 1:
        raise ConfigError(f"max_train_examples={config.max_train_examples!r}: must be a positive whole number")
    if config.learning_rate is not None and not config.learning_rate > 0:
        raise ConfigError(f"learning_rate={config.learning_rate!r}: must be a positive number")
    if config.mixed_precision not in (None, "bf16", "no"):
        raise ConfigError(f"mixed_precision={config.mixed_precision!r}: must be bf16 or no (TPUs do not take fp16)")
    if config.pure_bf16 not in (None, *PURE_BF16_CHOICES):
        raise ConfigError(f"pure_bf16={config.pure_bf16!r}: must be one of {', '.join(PURE_BF16_CHOICES)}")
    if config.pure_bf16 not in (None, "no") and config.mixed_precision == "no":
        raise ConfigError(f"pure_bf16={config.pure_bf16!r} needs mixed_precision=bf16 (float32 was asked for)")
    if config.parallelism not in PARALLELISMS:
        raise ConfigError(f"parallelism={config.parallelism!r}: must be one of {', '.join(PARALLELISMS)}")
    if config.fsdp_layer_class and config.parallelism != "fsdp":
        raise ConfigError("fsdp_layer_class is for parallelism='fsdp' only")
    if config.padding not in PADDING_MODES:
        raise ConfigError(f"padding={config.padding!r}: must be one of {', '.join(PADDING_MODES)}")
    if config.optim not in OPTIMIZERS:
        raise ConfigError(f"optim={config.optim!r}: must be one of {', '.join(OPTIMIZERS)}")
    if config.kahan_summation and config.optim != "adamw":
        raise ConfigError(f"kahan_summation=True is for optim='adamw' (optimi's AdamW), not optim={config.optim!r}")
    _check_schedule(config)
    _check_best_model(config)
    _check_lora(config)
    step_function.check(config)  # and what the JAX step cannot do: config/step_function.py


def _whole(value, least: int) -> bool:
    """A whole number (an int, not a bool: True would pass as 1) of at least `least`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _check_lora(config) -> None:
    if config.lora_r is None:
        for name in ("lora_alpha", "lora_dropout", "lora_target_modules", "merge_lora", "lora_frozen_float32"):
            if getattr(config, name) not in (None, False):
                raise ConfigError(f"{name}={getattr(config, name)!r} is for LoRA: set lora_r too (or leave {name} out)")
        return
    if not _whole(config.lora_r, least=1):
        raise ConfigError(f"lora_r={config.lora_r!r}: must be a positive whole number (the adapters' rank)")
    if config.lora_alpha is not None and not config.lora_alpha > 0:
        raise ConfigError(f"lora_alpha={config.lora_alpha!r}: must be a positive number")
    if config.lora_dropout is not None and not 0 <= config.lora_dropout < 1:
        raise ConfigError(f"lora_dropout={config.lora_dropout!r}: must be at least 0 and below 1")
    if config.lora_target_modules is not None and not [n for n in config.lora_target_modules.split(",") if n.strip()]:
        raise ConfigError(f"lora_target_modules={config.lora_target_modules!r}: must name layers, comma-separated")
    if config.merge_lora and not config.export:
        raise ConfigError("merge_lora=True: merging happens at the export; it needs export=true")


def _check_schedule(config) -> None:
    if not config.max_grad_norm >= 0:
        raise ConfigError(f"max_grad_norm={config.max_grad_norm!r}: must be 0 (no clipping) or a positive number")
    if config.lr_scheduler_type not in SCHEDULES:
        raise ConfigError(f"lr_scheduler_type={config.lr_scheduler_type!r}: must be one of {', '.join(SCHEDULES)}")
    if not 0 <= config.warmup_ratio < 1:
        raise ConfigError(f"warmup_ratio={config.warmup_ratio!r}: must be at least 0 and below 1")
    if not _whole(config.warmup_steps, least=0):
        raise ConfigError(f"warmup_steps={config.warmup_steps!r}: must be 0 or a positive whole number")
    if config.warmup_steps and config.warmup_ratio:
        raise ConfigError(f"warmup_steps={config.warmup_steps} and warmup_ratio={config.warmup_ratio}: give one of the two")
    if config.lr_scheduler_type == "constant" and (config.warmup_steps or config.warmup_ratio):
        raise ConfigError("lr_scheduler_type='constant' has no warm-up: use constant_with_warmup, or leave the warm-up out")


def _check_best_model(config) -> None:
    name = config.metric_for_best_model
    if not isinstance(name, str) or name.removeprefix("eval_") not in BEST_METRICS:
        raise ConfigError(f"metric_for_best_model={config.metric_for_best_model!r}: must be one of "
                          f"{', '.join(BEST_METRICS)} (eval_ prefix allowed)")
    if config.load_best_model_at_end and not config.export:
        raise ConfigError("load_best_model_at_end=True: the best weights are kept for the export; it needs export=true")
    patience = config.early_stopping_patience
    if patience is not None and not _whole(patience, least=1):
        raise ConfigError(f"early_stopping_patience={patience!r}: must be a positive whole number (evaluations)")
    if patience is not None and config.num_epochs == 1 and config.eval_steps is None:
        raise ConfigError(f"early_stopping_patience={patience}: the run evaluates once (num_epochs=1, no eval_steps), "
                          "so nothing is compared: give --eval_steps or more --num_epochs")
