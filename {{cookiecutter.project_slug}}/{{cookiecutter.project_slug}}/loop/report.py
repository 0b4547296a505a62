"""The end-of-run report: what the run did and measured, a short table on screen and the same fields as JSON."""

import json
from dataclasses import asdict
from pathlib import Path

from ..data.sources import DEMO_FILES
from ..launch.environment import versions
from ..models import lora
from ..models.modeling import model_facts
from ..precision import levels as precision
from ..tasks import task
from ..watch import flops
from ..xla.device import device_kind
from .context import RunContext

{% if cookiecutter.task == "causal-lm" -%}
TASK_FIELDS = ("steady_tokens_per_second", "train_padding_fraction", "eval_perplexity", "eval_loss",
               "eval_examples_counted", "eval_tokens_counted")
{%- else -%}
TASK_FIELDS = ("eval_accuracy", "eval_macro_f1", "eval_roc_auc", "eval_loss", "eval_examples_counted")
{%- endif %}
FIELDS = (
    "device", "distributed_type", "num_processes", "epochs", "train_examples", "train_batch", "steady_examples_per_second",
    "examples_per_second_with_compilation", "host_tracing_seconds_per_step", "step_function", "step_function_why",
    "steps_per_execution", "steps_per_execution_why", "steps_per_execution_calls", "learning_rate", *TASK_FIELDS,
    "xla_compilations", "recompilations", "compile_seconds", "compilation_cache", "precision", "model", "parameters", "data",
    "checkpoint", "checkpoint_seconds", "flops", "logging", "curves", "profile",
)


def run_report(context: RunContext, prepared, run, watch=None, checkpoints=None) -> dict:
    """The run's report from its parts (preparation.py), state (run_state.py) and callbacks (callbacks.py)."""
    accelerator, layout, config, precision_report = context.accelerator, context.layout, context.config, context.precision
    report = {
        "device": device_kind(accelerator.device),
        "distributed_type": str(accelerator.distributed_type.value),
        "num_processes": accelerator.num_processes,
        "epochs": run.num_epochs,
        "epochs_run": run.num_epochs - run.first_epoch,
        "process_compilations_after_each_epoch": run.compiled_by_epoch,
        "recompilations": watch.recompilations if watch else None,
        "graphs": watch.report() if watch else None,
        # A stream (a causal LM's --streaming) has no count.
        "train_examples": "streaming" if (counted := task.train_count(prepared.train_examples, config)) is None else counted,
        "train_batch": {"per_chip": prepared.train_batch_size, "accumulation_steps": prepared.accumulation,
                        "global": prepared.global_batch},
        **run.speeds(),
        "steady_step_seconds": watch.steady_step_seconds() if watch else None,
        "host_tracing_seconds_per_step": run.tracing.seconds_per_step(),
        "step_function": context.step.name,  # the step taken (config/step_function.py); auto's reason for a lazy one:
        "step_function_why": context.step.why,
        # Host-side floats: the scheduler lives on the host, reading it costs no device transfer.
        "learning_rate": {
            "schedule": config.lr_scheduler_type, "warmup_steps": config.warmup_for(prepared.optimizer_steps),
            "optimizer_steps": prepared.optimizer_steps, "first_step": run.first_learning_rate,
            "last_step": run.last_learning_rate, "after_training": prepared.scheduler.get_last_lr()[0],
        },
        **run.evaluation,
        "evaluations": run.evaluations,
        "precision": precision_report.as_dict(),
        "data": prepared.data.source,
        # The main process's (the others read its cache): tokenizing and packing, or reading them from the cache.
        "data_preparation_seconds": prepared.data_preparation["seconds"],
        "data_from_cache": prepared.data_preparation["from_cache"],
        "data_format": {"format": prepared.data.format, "loss": task.loss_covers(prepared.data.format)},
        **checkpoints.report(),
        "task": task.NAME,
        "model": model_facts(layout.plain_model(accelerator)),
        "layout": layout.describe(accelerator, prepared.optimizer, precision.bytes_on_device(precision_report)),
        "config": asdict(config),  # as given, with what the run used instead where it is the demo (used_instead)
        "versions": versions(),
    }
    # Trainable vs total elements, and the optimizer state one device holds: the layout's count (data: the whole
    # state of the trainable parameters, on every device; fsdp: the largest device's shards, from the index ranges
    # torch_xla reports for each state tensor's shard, not the whole divided by the device count).
    report["parameters"] = {
        **lora.parameter_counts(layout.plain_model(accelerator)),
        "optimizer_state_bytes_per_device": report["layout"]["optimizer_bytes_per_device"],
    }
    # The host's share of the step: on a TPU the chip waits while the host traces (watch/host_tracing.py).
    report["host_share_of_step"] = run.tracing.host_share(report["device"], report["steady_step_seconds"])
    report["config"].update(used_instead(context.demo, prepared.data.source, report["model"]))
    report["lora"] = lora.report(config.model, layout.plain_model(accelerator))
    # Positions per example: one length only with fixed padding (blocks of it, for a language model).
    report["flops"] = flops.utilisation(
        layout.plain_model(accelerator), config.max_seq_length if config.padding == "fixed" else None,
        report["steady_examples_per_second"], prepared.replicas, report["device"],
    )
    report.update(task.facts(prepared.train_examples, prepared.collator, config, report))
    return report


def used_instead(demo: bool, data_source: str, model: dict) -> dict:
    """The report's config as the run used it: the demo trains a model built from a config, not the bake's
    --model_name_or_path, and on the shipped files, not the default --dataset."""
    used = {}
    if demo:
        used.update(demo=True, model_name_or_path=f"the demo's {model['architecture']}, built from a config (random weights)")
    if data_source == "demo":
        used.update(dataset="files", train_file=str(DEMO_FILES["train"]), eval_file=str(DEMO_FILES["eval"]))
    return used


def format_table(report: dict) -> str:
    rows = []
    for name in FIELDS:
        value = report.get(name)
        if isinstance(value, float):
            value = f"{value:.4g}"
        elif isinstance(value, dict):
            value = ", ".join(f"{key}={item}" for key, item in value.items())
        rows.append((name, "n/a" if value is None else str(value)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def write_report(report: dict, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return path
