"""The run's picture: training loss, the eval metric and the learning rate against the optimizer step, drawn with
matplotlib from OUTPUT_DIR/metrics.jsonl (so that a resumed run's picture holds the whole run)."""

import json
import threading
from pathlib import Path

CURVES_FILE = "curves.png"
_importing = None  # the thread importing matplotlib while the run trains


def import_in_background() -> None:
    """Import matplotlib on a thread of its own while the run trains, not at its end.

    The import took 0.3-0.4 s of the benchmarks' 24-step demo run on XLA:CPU; torch_xla releases the GIL while it
    compiles and runs a graph, so on a thread the import overlaps them. `draw` waits for it.
    """
    global _importing
    if _importing is None:
        _importing = threading.Thread(target=_import_matplotlib, name="curves-import", daemon=True)
        _importing.start()


def _import_matplotlib() -> None:
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window: a TPU VM has no screen
    import matplotlib.pyplot  # noqa: F401


def draw(metrics_path, picture_path) -> str | None:
    """Write the picture; its path, or None when nothing was logged (--logging_steps 0 and no evaluation)."""
    records = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()] \
        if Path(metrics_path).exists() else []
    if not records:
        return None
    if _importing is not None:
        _importing.join()
    else:
        _import_matplotlib()
    import matplotlib.pyplot as plt

    logs = [record for record in records if "learning_rate" in record]
    evaluations = [record for record in records if "eval_loss" in record]
    metric = next((name for name in ("eval_accuracy", "eval_perplexity") if evaluations and name in evaluations[0]),
                  "eval_loss")
    figure, (loss_axes, metric_axes, rate_axes) = plt.subplots(3, 1, figsize=(7, 7.5), sharex=True)
    loss_axes.plot([r["step"] for r in logs], [r["loss"] for r in logs], marker=".", label="training (since the last log)")
    loss_axes.plot([r["step"] for r in evaluations], [r["eval_loss"] for r in evaluations], marker="o", label="eval")
    loss_axes.set_ylabel("loss")
    loss_axes.legend()
    metric_axes.plot([r["step"] for r in evaluations], [r[metric] for r in evaluations], marker="o", color="tab:green")
    metric_axes.set_ylabel(metric.removeprefix("eval_"))
    rate_axes.plot([r["step"] for r in logs], [r["learning_rate"] for r in logs], marker=".", color="tab:purple")
    rate_axes.set_ylabel("learning rate")
    rate_axes.set_xlabel("optimizer step")
    for axes in (loss_axes, metric_axes, rate_axes):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    Path(picture_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(picture_path, dpi=100)
    plt.close(figure)
    return str(picture_path)
