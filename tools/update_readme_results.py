"""Put the latest results `make test` and `make demo` leave into the docs: the Models table and the demo's picture.

(docs/benchmarks.md and each bake's benchmark page are drawn by tools/reference_run.py from the reference run.)

The Models table of docs/models.md (`<!-- models:start -->` ... `<!-- models:end -->`) comes from
benchmark-results/models/*.json, the architecture matrix's rows that each bake's tests/test_models.py writes when
MODEL_MATRIX_RESULTS names that folder.
The README's demo picture (`<!-- demo:start -->` ... `<!-- demo:end -->`) comes from the run `make demo` left in
build/demo/<slug>/outputs: its curves.png is copied to docs/demo-curves.png (the README can only show a committed
image) and its report's flops field is quoted as the report prints it; missing markers are added at the end.
Usage: python tools/update_readme_results.py [README.md] [benchmark-results] [the demo's outputs folder]
(the docs/ written are the ones beside that README).
"""

import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("<!-- models:start -->", "<!-- models:end -->")
MODEL_COLUMNS = ("Architecture", "Task", "Layout", "XLA graphs", "Transfers / epoch", "Recompilations",
                 "Eval loss (untrained → trained)", "Status")


def _figure(value, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def models_section(folder: Path) -> str | None:
    """The Models table from every task's matrix file in `folder`, or None when there is none."""
    files = sorted(folder.glob("*.json"))
    if not files:
        return None
    lines = [MODELS[0], "", "| " + " | ".join(MODEL_COLUMNS) + " |", "|" + "---|" * len(MODEL_COLUMNS)]
    for path in files:
        for row in json.loads(path.read_text())["rows"]:
            devices = row.get("devices")
            layout = f"{row['layout']} ({devices} device{'s' if devices != 1 else ''})" if devices else row["layout"]
            loss = f"{_figure(row.get('untrained_eval_loss'), 3)} → {_figure(row.get('eval_loss'), 3)}"
            status = row["status"] if not row.get("problems") else f"{row['status']}: {'; '.join(row['problems'])}"
            cells = (row["architecture"], row["task"], layout, _figure(row.get("graphs")),
                     _figure(row.get("transfers_per_epoch"), 0), _figure(row.get("recompilations")), loss, status)
            lines.append("| " + " | ".join(cells) + " |")
    when = max(path.stat().st_mtime for path in files)
    stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d %H:%M")
    lines += ["", f"Written by the baked projects' tests/test_models.py ({stamp} UTC); regenerate with `make test` "
              "then `make results`.", "", MODELS[1]]
    return "\n".join(lines)


def place(text: str, markers: tuple[str, str], new: str, before: str | None = None) -> str:
    """`new` in place of the text between the markers (both included) where they are; else just before `before`
    where that is in the text; else at the end."""
    start, end = markers
    if start in text and end in text:
        head, _, rest = text.partition(start)
        return head + new + rest.partition(end)[2]
    if before is not None and before in text:
        head, _, tail = text.partition(before)
        return f"{head}{new}\n\n{before}{tail}"
    return text.rstrip("\n") + f"\n\n{new}\n"


def update_models(text: str, folder: Path) -> str:
    new = models_section(folder)
    return text if new is None else place(text, MODELS, new)


DEMO = ("<!-- demo:start -->", "<!-- demo:end -->")
DEMO_OUTPUTS = ROOT / "build" / "demo" / "tpu_text_classifier" / "outputs"
DEMO_PICTURE = "docs/demo-curves.png"  # relative to the README


def demo_section(report_file: Path) -> str:
    """The README's text around the demo run's picture: what the run did, and its report's flops field."""
    report = json.loads(report_file.read_text())
    rates, logging = report["learning_rate"], report["logging"]
    stamp = datetime.fromtimestamp(report_file.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d %H:%M")
    flops = ", ".join(f"{key}={value}" for key, value in report["flops"].items())
    return "\n".join([
        DEMO[0], "", f"![The demo run's curves: loss, eval accuracy and learning rate against the step]({DEMO_PICTURE})",
        "",
        f"`make demo` ({stamp} UTC, {report['device']}): {report['epochs']} epochs, "
        f"{rates['optimizer_steps']} optimizer steps, a log every {logging['logging_steps']} steps ({logging['logs']} "
        f"logs in {logging['metrics_file']}), eval {report['eval_loss']:.4g} loss and "
        f"{report.get('eval_accuracy', 'n/a')} accuracy at the end. The run drew this picture from its metrics file: "
        "the training loss of each window between logs, the eval loss and accuracy of each epoch's evaluation, and "
        "the learning rate of each logged step. Its report's `flops` field (no MFU on the CPU, "
        "and the report says why):",
        "", "```", f"flops  {flops}", "```", "", "Regenerated by `make results` (which runs `make demo`).", "",
        DEMO[1]])


def update_demo(text: str, outputs: Path, root: Path) -> str:
    """The demo section from the run in `outputs`, its picture copied beside the README; the text as it was without
    such a run."""
    report_file, picture = outputs / "report.json", outputs / "curves.png"
    if not (report_file.exists() and picture.exists()):
        return text
    (root / DEMO_PICTURE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(picture, root / DEMO_PICTURE)
    return place(text, DEMO, demo_section(report_file))


def rewrite(path: Path, title: str, change) -> None:
    """`path`'s text as `change` gives it (a new file starts with `title`), written only where it changed."""
    text = path.read_text() if path.exists() else f"{title}\n"
    new = change(text)
    if new != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(new)


def update(readme: Path, results_root: Path, demo_outputs: Path = DEMO_OUTPUTS) -> None:
    """The demo's picture into `readme`; the Models table into the docs/ beside it (docs/benchmarks.md and the bakes'
    benchmark pages are tools/reference_run.py's)."""
    rewrite(readme, "", lambda text: update_demo(text, demo_outputs, readme.parent))
    docs = readme.parent / "docs"
    rewrite(docs / "models.md", "# Models", lambda text: update_models(text, results_root / "models"))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    update(Path(arguments[0]) if arguments else ROOT / "README.md",
           Path(arguments[1]) if len(arguments) > 1 else ROOT / "benchmark-results",
           Path(arguments[2]) if len(arguments) > 2 else DEMO_OUTPUTS)
