"""The run's pictures, drawn with matplotlib from OUTPUT_DIR/metrics.jsonl (so that a resumed run's pictures hold the
whole run): training loss, the eval metric and the learning rate against the optimizer step (curves.png) and, for a
classifier, the last evaluation's confusion matrix (confusion.png)."""

import json
import threading
from pathlib import Path

CURVES_FILE = "curves.png"
CONFUSION_FILE = "confusion.png"
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
    records = read(metrics_path)
    if not records:
        return None
    figure = plotted(records)
    Path(picture_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(picture_path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(figure)
    confusions = [record["eval_confusion_matrix"] for record in records if "eval_confusion_matrix" in record]
    if confusions:
        figure = confusion_plotted(confusions[-1])
        figure.savefig(Path(picture_path).with_name(CONFUSION_FILE), dpi=100)
        plt.close(figure)
    return str(picture_path)


def confusion_plotted(confusion: list[list[int]]):
    """The confusion matrix as a picture: true labels down, predicted across, each cell's count written in it."""
    import matplotlib.pyplot as plt

    classes = len(confusion)
    size = min(2 + 0.6 * classes, 12)
    figure, axes = plt.subplots(figsize=(size, size))
    axes.imshow(confusion, cmap="Blues")
    largest = max(max(row) for row in confusion) or 1
    for row in range(classes):
        for column in range(classes):
            count = confusion[row][column]
            axes.text(column, row, str(count), ha="center", va="center",
                      color="white" if count > largest / 2 else "black")
    axes.set_xticks(range(classes))
    axes.set_yticks(range(classes))
    axes.set_xlabel("predicted label")
    axes.set_ylabel("true label")
    axes.set_title("last evaluation")
    figure.tight_layout()
    return figure


def read(metrics_path) -> list[dict]:
    path = Path(metrics_path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def plotted(records: list[dict]):
    """The picture's figure, before it is saved: what `draw` writes (the tests read its lines' points)."""
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
    return figure
