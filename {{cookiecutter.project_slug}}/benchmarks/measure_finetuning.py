"""Does each precision level learn when it fine-tunes? One pretrained model, fine-tuned in every level.

"Pretrained": the demo model trained from scratch in float32 at the demo's own learning rate, then exported with
save_pretrained. Every level fine-tunes that folder on the demo data (`--dataset files` with the demo's own files,
so the folder's model and tokenizer are used, as a user's pretrained model would be) at a fine-tuning learning rate,
the same optimizer steps in each. Each run is the project's own `training_function` in a fresh process: the pure
levels' XLA variables are read once per process.

What each run measures, from its report and the weights it exported:
  fraction_changed       elements of the linear layers' weight matrices whose exported value differs from where
                         the level started: the pretrained weights, rounded to bf16 for the levels that store bf16
                         weights (the first thing those do is that rounding, so it is no update). Linear layers
                         only: every batch's gradient reaches each of their elements, while an embedding row of a
                         token or position the fine-tuning data never holds gets no update in any level.
  update_norm            the norm of that difference over all those matrices (relative to fp32's: update_norm_vs_fp32)
  eval metric            accuracy (classification) or perplexity (causal LM), as the run reported it
  eval_loss_gap_to_host  |reported eval loss - the exported model's eval loss re-evaluated in float32 on the host|,
                         relative to the latter: what the level's own evaluation adds to the model's true loss
  state_bytes_per_device parameters + optimizer state as the device stores them (the report's layout, read from
                         the element types of the lowered graph)
  steady_step_s, compilations  the report's
"""

import math
import os
import resource
import time

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES
from {{ cookiecutter.project_slug }}.tasks import task

from .profiles import Profile

# What a fine-tuning run of a pretrained model would use (the measurements used these).
FINE_TUNING_RATE = {"text-classification": 2e-5, "causal-lm": 1e-5}
METRIC = {"text-classification": "eval_accuracy", "causal-lm": "eval_perplexity"}
# No weight decay while fine-tuning here, for two reasons. Decay moves every float32 element by itself, so that
# "changed" would no longer say whether the gradient's updates were kept. And AdamW multiplies each weight by
# 1 - lr * weight_decay, which rounds to exactly 1.0 in float32 once lr * weight_decay < 2**-25 (lr < 3e-6 at
# decay 0.01, the last steps of a linear schedule from a fine-tuning rate): torch_xla compiles a 0 or a 1 as a
# constant of its own graph, so every run would compile one more training graph near its end.
WEIGHT_DECAY = 0.0

# Each level by the options a user gives train.py, in the order of the table.
LEVELS = {
    "fp32": {"mixed_precision": "no"},
    "bf16": {"mixed_precision": "bf16", "pure_bf16": "no"},
    "pure-bf16-xla": {"mixed_precision": "bf16", "pure_bf16": "xla"},
    "pure-bf16-xla+kahan": {"mixed_precision": "bf16", "pure_bf16": "xla", "kahan_summation": True},
    "pure-bf16-downcast": {"mixed_precision": "bf16", "pure_bf16": "downcast"},
    "pure-bf16-downcast+kahan": {"mixed_precision": "bf16", "pure_bf16": "downcast", "kahan_summation": True},
    "pure-bf16-cast": {"mixed_precision": "bf16", "pure_bf16": "cast"},
}


def fine_tuning_rate() -> float:
    return FINE_TUNING_RATE[task.NAME]


def _quiet_run(**settings) -> TrainConfig:
    """What every run here shares: no checkpoints, no persistent cache (each run compiles its own graphs)."""
    # The lazy step at every level: the XLA bf16 levels and Kahan summation take it anyway (config/step_function.py),
    # so the levels differ in their precision only.
    return TrainConfig(checkpoint=False, compilation_cache=False, export=True, step_function="lazy", **settings)


def _cpu_seconds() -> float:
    """CPU seconds this process used so far, every thread (compiling is most of them)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def pretrain(profile: Profile, output_dir: str) -> dict:
    """The demo model from scratch in float32 at the demo's learning rate; returns where it was exported."""
    from {{ cookiecutter.project_slug }}.loop import training

    started = time.perf_counter()
    config = _quiet_run(
        demo=True, mixed_precision="no", pure_bf16="no", max_seq_length=profile.finetune_seq_length,
        num_epochs=profile.pretrain_epochs, max_train_examples=profile.pretrain_train_examples,
        output_dir=output_dir, watch_compilations=False,
    )
    report = training.training_function(config=config)
    metric = METRIC[task.NAME]
    return {"model": report["exported"], "eval_loss": report["eval_loss"], metric: report[metric],
            "optimizer_steps": report["learning_rate"]["optimizer_steps"], "wall_s": time.perf_counter() - started,
            "cpu_s": _cpu_seconds()}


def fine_tune_config(level: str, profile: Profile, pretrained: str, output_dir: str) -> TrainConfig:
    return _quiet_run(
        demo=False, model_name_or_path=pretrained, dataset="files", train_file=str(DEMO_FILES["train"]),
        eval_file=str(DEMO_FILES["eval"]), max_seq_length=profile.finetune_seq_length,
        num_epochs=profile.finetune_epochs, max_train_examples=profile.finetune_train_examples,
        train_batch_size=profile.finetune_batch_size, learning_rate=fine_tuning_rate(), weight_decay=WEIGHT_DECAY,
        output_dir=output_dir, **LEVELS[level],
    )


def linear_weights(model) -> dict:
    """The weight matrices of the model's linear layers (projections, heads), by their state_dict names."""
    import torch

    return {f"{name}.weight": module.weight.detach() for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)}


def compare_weights(start: dict, end: dict, rounded_to_bf16: bool) -> dict:
    """Elements that changed and the norm of the whole update, each element compared as the level stored it."""
    import torch

    changed = total = 0
    squares = 0.0
    for name, before in start.items():
        before = before.to(torch.bfloat16) if rounded_to_bf16 else before
        delta = end[name].double() - before.double()  # bf16 and float32 values are exact in float64
        changed += int((delta != 0).sum())
        total += delta.numel()
        squares += float((delta * delta).sum())
    return {"fraction_changed": changed / total, "update_norm": math.sqrt(squares), "weight_elements": total}


def fine_tune(level: str, profile: Profile, pretrained: str, output_dir: str) -> dict:
    """One level fine-tuning the pretrained folder, in this (fresh) process; what it kept, reported and cost."""
    from {{ cookiecutter.project_slug }}.loop import training
    from {{ cookiecutter.project_slug }}.loop.host_evaluation import evaluate_on_host

    started = time.perf_counter()
    config = fine_tune_config(level, profile, pretrained, output_dir)
    report = training.training_function(config=config)
    run_seconds = time.perf_counter() - started
    stored = report["precision"]["stored"]["weights"]
    exported = task.AUTO_MODEL.from_pretrained(report["exported"])
    kept = compare_weights(linear_weights(task.AUTO_MODEL.from_pretrained(pretrained)), linear_weights(exported),
                           rounded_to_bf16=stored == "bf16")
    # The exported model on the plain CPU in float32, with the eval examples the run evaluated on.
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=False)
    host = evaluate_on_host(exported, tokenizer, eval_examples, config.max_seq_length)
    layout, risk = report["layout"], report["precision"]["updates_at_risk"]
    metric = METRIC[task.NAME]
    return {
        "level": level, "effective": report["precision"]["effective"], "via": report["precision"]["via"],
        "kahan_summation": report["precision"]["kahan_summation"], "weights_stored": stored,
        "learning_rate": config.learning_rate, "optimizer_steps": report["learning_rate"]["optimizer_steps"],
        **kept,
        # What the run predicted it would lose (pure levels without compensation): weights at or above the size
        # where every update rounds away, as a fraction of all parameter elements.
        "updates_at_risk": risk["fraction_of_elements"] if risk else None,
        metric: report[metric], "eval_loss": report["eval_loss"], "host_eval_loss": host["eval_loss"],
        "eval_loss_gap_to_host": abs(report["eval_loss"] - host["eval_loss"]) / host["eval_loss"],
        "eval_counted": report["eval_examples_counted"], "eval_counted_on_host": host["eval_examples_counted"],
        "parameter_bytes_per_device": layout["parameter_bytes_per_device"],
        "optimizer_bytes_per_device": layout["optimizer_bytes_per_device"],
        "state_bytes_per_device": layout["parameter_bytes_per_device"] + layout["optimizer_bytes_per_device"],
        "steady_step_s": report["steady_step_seconds"], "compilations": report["xla_compilations"],
        "recompilations": report["recompilations"], "device": report["device"], "run_s": run_seconds,
        "run_cpu_s": _cpu_seconds(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
