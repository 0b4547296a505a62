"""The exported folder's README.md: a model card the hub shows as it is (its front matter is the hub's metadata).

It says what the model was trained from and on (with row counts), how (the settings as a command line, the precision
level, the graphs compiled) and how well (the eval metrics), and which template made the project (.cruft.json).
"""

import json
import shlex
from dataclasses import asdict, fields
from pathlib import Path

from ..config import TrainConfig
from ..tasks import task

CARD_FILE = "README.md"
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # train.py, pyproject.toml and .cruft.json (an editable install)
PIPELINE_TAG = {"text-classification": "text-classification", "causal-lm": "text-generation"}


def command_line(config: TrainConfig) -> str:
    """`python train.py` with every setting that is not its default: the run again, from the CLI."""
    defaults, flags = asdict(TrainConfig()), []
    for option in fields(TrainConfig):
        value = getattr(config, option.name)
        if value == defaults[option.name] or value is None:
            continue
        flags += [f"--{option.name}", str(value).lower() if isinstance(value, bool) else str(value)]
    return shlex.join(["python", "train.py", *flags])


def template_version() -> str:
    """The template and commit the project was baked from, as .cruft.json records them."""
    try:
        record = json.loads((PROJECT_ROOT / ".cruft.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unknown (no .cruft.json beside the package)"
    return f"{record.get('template', 'unknown')} at {record.get('commit') or 'an uncommitted checkout'}"


def metric_rows(report: dict) -> list[str]:
    """A markdown table of an evaluation's numbers (the report's: its last), then a classifier's confusion matrix."""
    rows = ["| metric | value |", "|---|---|"]
    for name, value in report.items():
        if name.startswith("eval_") and isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append(f"| {name.removeprefix('eval_')} | {value:.4f} |" if isinstance(value, float)
                        else f"| {name.removeprefix('eval_')} | {value} |")
    confusion = report.get("eval_confusion_matrix")
    if confusion:
        labels = range(len(confusion))
        rows += ["", "Confusion matrix (true labels down, predicted across):", "",
                 "| | " + " | ".join(f"predicted {label}" for label in labels) + " |",
                 "|---" * (len(confusion) + 1) + "|"]
        rows += [f"| true {label} | " + " | ".join(str(count) for count in row) + " |" for label, row in zip(labels, confusion, strict=True)]
    return rows


def exported_evaluation(report: dict) -> dict:
    """The exported weights' evaluation: the best one's with --load_best_model_at_end, else the last one's (the
    report's; none when a resumed run had nothing left to train)."""
    exported = (report.get("best_model") or {}).get("exported")
    return exported["evaluation"] if exported else report


def evaluation_lines(report: dict) -> list[str]:
    exported = (report.get("best_model") or {}).get("exported")
    if not exported:
        return metric_rows(report)
    return [f"The best evaluation's weights by {exported['metric']} (epoch {exported['epoch']}, step "
            f"{exported['global_step']}; --load_best_model_at_end), not the last evaluation's:", "",
            *metric_rows(exported["evaluation"])]


def card(report: dict, config: TrainConfig) -> str:
    demo = report["config"].get("demo")
    base = None if demo else config.model_name_or_path
    data = report["data"]
    files = [f"`{getattr(config, name)}`" for name in ("train_file", "eval_file") if getattr(config, name)]
    source = "the demo's shipped files" if data == "demo" else (", ".join(files) if files else f"`{data}`")
    shown = exported_evaluation(report)
    evaluated = shown.get("eval_tokens_counted")
    precision, graphs = report["precision"], report.get("xla_compilations")
    front = {"library_name": "transformers", "pipeline_tag": PIPELINE_TAG[task.NAME], "tags": ["tpu-template", "pytorch-xla"]}
    if base:
        front["base_model"] = base
    lines = [
        "---", *(f"{key}: {json.dumps(value)}" for key, value in front.items()), "---", "",
        f"# {task.NAME} model",
        "",
        f"Fine-tuned from `{base}`." if base else f"The demo's {report['model']['architecture']}, built from a config "
        "(random weights), trained on the shipped files.",
        "",
        "## Data",
        "",
        f"- trained on {source}: {report['train_examples']} " + ("(a stream)" if report["train_examples"] == "streaming"
                                                                    else "blocks" if evaluated else "examples"),
        f"- evaluated on {shown.get('eval_examples_counted', 'no')} "
        + (f"blocks of {config.max_seq_length} tokens ({evaluated} tokens counted)" if evaluated else "examples"),
        "",
        "## Training",
        "",
        f"- the settings: `{command_line(config)}`",
        f"- {report['epochs']} epochs, global batch {report['train_batch']['global']}, "
        f"{report['learning_rate']['optimizer_steps']} optimizer steps, peak learning rate "
        f"{config.resolved_learning_rate(bool(demo)):g} ({config.lr_scheduler_type})",
        f"- precision: {precision['effective']} ({precision.get('verified') or 'not verified'})",
        f"- on {report['device']} x {report['num_processes']} processes: "
        + (f"{graphs} XLA graphs compiled, {report['recompilations']} after warm-up" if graphs is not None
           else "no XLA device"),
        f"- made with the template {template_version()}",
        *([f"- stopped early at epoch {stop['epoch']}, step {stop['global_step']}: {stop['why']}"]
          if (stop := report.get("early_stopping") or {}).get("stopped") else []),
        "",
        "## Evaluation",
        "",
        *evaluation_lines(report),
        "",
    ]
    return "\n".join(lines)


def write(folder, report: dict, config: TrainConfig) -> str:
    path = Path(folder) / CARD_FILE
    path.write_text(card(report, config), encoding="utf-8")
    return str(path)
