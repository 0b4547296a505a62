"""The end-of-run report: a short table on screen and the same fields as JSON."""

import json
from pathlib import Path

{% if cookiecutter.task == "causal-lm" -%}
TASK_FIELDS = ("steady_tokens_per_second", "train_padding_fraction", "eval_perplexity", "eval_loss",
               "eval_examples_counted", "eval_tokens_counted")
{%- else -%}
TASK_FIELDS = ("eval_accuracy", "eval_loss", "eval_examples_counted")
{%- endif %}
FIELDS = (
    "device", "distributed_type", "num_processes", "epochs", "train_examples", "steady_examples_per_second",
    "examples_per_second_with_compilation", "learning_rate", *TASK_FIELDS,
    "xla_compilations", "recompilations", "compile_seconds", "compilation_cache", "precision", "data", "checkpoint",
    "checkpoint_seconds",
)


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
