"""The template's reference benchmark run: each task's results file and the page it draws, committed in the template.

    python tools/reference_run.py [--text-classification RESULTS.json ...] [--causal-lm RESULTS.json ...]

For each task, its results files (by default the ones `make test` leaves: benchmark-results/results.json and
alone/results.json for the classifier, benchmark-results/causal-lm/ and causal-lm/alone/ for the language model; a
run with BENCH_TPU=1 adds the TPU compiler's columns) are merged into
{{cookiecutter.project_slug}}/docs/reference/<task>/reference-results.json. A bake of that task then draws its page,
pictures and full tables from that file (`python -m benchmarks.page --reference`), copied beside it: the post-gen hook
puts them in every bake's docs/. Last, the template's docs/benchmarks.md: the default bake's two answers with their
pictures, then a link to each task's page. tests/test_reference_run.py holds the template's page to the files;
each bake's tests/test_benchmark_page.py holds its own.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLUG_DIR = ROOT / "{{cookiecutter.project_slug}}"
RESULTS = ROOT / "benchmark-results"
DEFAULTS = {"text-classification": (RESULTS / "results.json", RESULTS / "alone" / "results.json"),
            "causal-lm": (RESULTS / "causal-lm" / "results.json", RESULTS / "causal-lm" / "alone" / "results.json")}
PAGE = ROOT / "docs" / "benchmarks.md"
MAX_LINES = 150
# The answers of the template's page, drawn in a bake of the default task by its own page module.
ANSWERS = """
import json, sys
from benchmarks import page, results_file
run = results_file.load(results_file.REFERENCE)
print(json.dumps({"about": page.about(run, "The reference run"), "answers": page.answer_sections(run),
                  "pictures": [page.picture_name(a) for a in page.answering.answers(results_file.records(run))]}))
"""


def reference_folder(task: str) -> Path:
    return SLUG_DIR / "docs" / "reference" / task


def bake(task: str, into: Path) -> Path:
    subprocess.run([sys.executable, "-m", "cookiecutter", str(ROOT), "--no-input", "--output-dir", str(into),
                    f"task={task}"], check=True, capture_output=True)
    return next(path for path in into.iterdir() if path.is_dir())


# Run in the bake: its own results_file module merges the runs (the template's copy is not importable by name here).
MERGE = """
import json, sys
from benchmarks.results_file import REFERENCE, load, merged
REFERENCE.write_text(json.dumps(merged(*[load(path) for path in sys.argv[1:]]), indent=1, sort_keys=True) + "\\n")
"""


def draw_task(task: str, paths, scratch: Path) -> Path:
    """The task's reference files into the template; the bake that drew them."""
    project = bake(task, scratch / task)
    found = [str(Path(path).resolve()) for path in paths if Path(path).is_file()]
    if not found:
        raise SystemExit(f"error: {task}: none of {', '.join(map(str, paths))} is there (make test writes them)")
    subprocess.run([sys.executable, "-c", MERGE, *found], cwd=project, check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "benchmarks.page", "--reference"], cwd=project, check=True,
                   capture_output=True)
    folder = reference_folder(task)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name in ("reference-results.json", "benchmarks.md", "benchmark-tables.md"):
        shutil.copy2(project / "docs" / name, folder / name)
    for picture in (project / "docs").glob("benchmarks-*.png"):
        shutil.copy2(picture, folder / picture.name)
    return project


def template_page(project: Path) -> tuple[str, list[str]]:
    """The template's docs/benchmarks.md from a bake of the default task (its reference files in place), and the
    pictures it shows (in that bake's docs/)."""
    found = json.loads(subprocess.run([sys.executable, "-c", ANSWERS], cwd=project, check=True, capture_output=True,
                                      text=True).stdout)
    pages = {task: f"../%7B%7Bcookiecutter.project_slug%7D%7D/docs/reference/{task}/benchmarks.md" for task in DEFAULTS}
    lines = [
        "# Benchmarks", "",
        "Every baked project carries a benchmark suite (`benchmarks/`) that measures what the TPU guidance claims, and "
        "a page of its answers (its docs/benchmarks.md) drawn from the template's reference run of that task. "
        f"{found['about']} The two answers below are that page's opening for the default bake (text-classification); "
        "`make results` draws them again (tools/reference_run.py), and tests/test_reference_run.py fails when this "
        "page differs from the committed results.", "",
        *found["answers"],
        "## Each bake's page", "",
        f"- text-classification (the default bake): [its docs/benchmarks.md]({pages['text-classification']}), drawn "
        "from reference-results.json beside it; every other group of its suite in one line, with links to the full "
        "tables.",
        f"- causal-lm: [its docs/benchmarks.md]({pages['causal-lm']}): what each way of padding the text adds, the "
        "precision levels on the language model, the loop against TRL's SFTTrainer.", "",
        "A bake's own run (`python -m pytest benchmarks`) writes the same page for itself into benchmark-results/, with "
        "the reference's answers beside its own. `make test` runs both tasks' quick profiles and checks what their "
        "results say (benchmarks/test_reference_suite.py); `make results` then turns them into the reference; a run "
        "with BENCH_TPU=1 adds the TPU compiler's columns.",
    ]
    return "\n".join(lines) + "\n", found["pictures"]


# docs/chip-waiting.md's two tables of the group "full size: host against chip", drawn from both tasks' reference runs
# (a bake has only its own task's): between these markers in the template's copy, which the bakes render.
HOST = ("<!-- host-table:start -->", "<!-- host-table:end -->")
CALLS = ("<!-- calls-table:start -->", "<!-- calls-table:end -->")
CHIP_WAITING = SLUG_DIR / "docs" / "chip-waiting.md"
HOST_ROWS = (("plain", "a bare lazy loop (forward, backward, clip, torch's AdamW foreach)"),
             (("tuned-trainer", "sft-trainer"), "the library's own step (transformers' Trainer TPU-tuned; TRL's SFTTrainer)"),
             ("project-lazy", "this project's step, lazy"),
             ("project-jax", "this project's step, the JAX step (the default), 1 step a call"))
CALL_ROWS = (("project-jax", "the JAX step, 1 step a call"), ("project-jax-k4", "4 steps a call"),
             ("project-jax-k16", "16 steps a call"), ("project-default", "the defaults, auto's K on each chip"))
CHIPS = (("v5e", "v5e"), ("v6e", "v6e"), ("v7x", "tpu7x"))


def full_size(task: str) -> tuple[dict, dict]:
    """(the task's reference run, its full-size rows by name)."""
    run = json.loads((reference_folder(task) / "reference-results.json").read_text())
    rows = {entry["name"]: entry["extra_info"] for entry in run["records"]
            if entry["group"] == "full size: host against chip" and entry["outcome"] == "passed"}
    return run, rows


def _row(rows: dict, names) -> dict | None:
    return next((rows[name] for name in ((names,) if isinstance(names, str) else names) if name in rows), None)


def chip_tables() -> tuple[str, str]:
    """The host-against-chip table and the steps-per-call table, each with the run it comes from."""
    runs = {task: full_size(task) for task in DEFAULTS}
    columns = []
    for _, rows in runs.values():
        any_row = next(iter(rows.values()))
        columns.append((f"{any_row['model']} ({any_row['layers']} layers, {any_row['tensors']} tensors)", rows))
    source = "; ".join(f"{task}: {run['made']}, {run['machine']}" for task, (run, _) in runs.items())
    head = ["| host ms per step | " + " | ".join(name for name, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    host = [*head]
    for names, label in HOST_ROWS:
        cells = [(f"{row['tracing_ms']:.1f}" if (row := _row(rows, names)) else "-") for _, rows in columns]
        host.append(f"| {label} | " + " | ".join(cells) + " |")
    for key, chip in CHIPS:
        cells = [f"{next(iter(rows.values()))[f'chip_ms_{key}']:.1f}" for _, rows in columns]
        host.append(f"| a {chip} {'device (half a chip)' if chip == 'tpu7x' else 'chip'}'s compute at 50 % MFU (computed) | "
                    + " | ".join(cells) + " |")
    calls = ["| host ms per step, and host over chip (" + ", ".join(chip for _, chip in CHIPS) + ") | "
             + " | ".join(name.split(" (")[0] for name, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    for name, label in CALL_ROWS:
        cells = []
        for _, rows in columns:
            row = rows.get(name)
            if row is None:
                cells.append("-")
                continue
            over = ", ".join(f"{row[f'host_over_chip_{key}']:.2f}" for key, _ in CHIPS)
            chosen = row.get("steps_per_execution")
            if isinstance(chosen, dict):
                ks = ", ".join(str(chosen.get(chip, "?")) for _, chip in CHIPS)
                cells.append(f"K = {ks}: {over}")
            else:
                cells.append(f"{row['tracing_ms']:.2g} ({over})")
        calls.append(f"| {label} | " + " | ".join(cells) + " |")
    said = f"Drawn by tools/reference_run.py from the reference runs (docs/reference-results.json; {source})."
    return ("\n".join([HOST[0], "", *host, "", said, "", HOST[1]]),
            "\n".join([CALLS[0], "", *calls, "", said, "", CALLS[1]]))


def placed(text: str, markers: tuple[str, str], new: str) -> str:
    head, found, rest = text.partition(markers[0])
    if not found:
        raise SystemExit(f"error: {CHIP_WAITING}: no {markers[0]} marker")
    return head + new + rest.partition(markers[1])[2]


def chip_waiting() -> str:
    """The template's docs/chip-waiting.md with both tables drawn again."""
    host, calls = chip_tables()
    return placed(placed(CHIP_WAITING.read_text(), HOST, host), CALLS, calls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for task, paths in DEFAULTS.items():
        parser.add_argument(f"--{task}", nargs="+", type=Path, default=list(paths), dest=task.replace("-", "_"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        projects = {task: draw_task(task, getattr(args, task.replace("-", "_")), Path(scratch)) for task in DEFAULTS}
        text, pictures = template_page(projects["text-classification"])
        for name in pictures:
            shutil.copy2(projects["text-classification"] / "docs" / name, ROOT / "docs" / name)
    if len(text.splitlines()) > MAX_LINES:
        print(f"error: docs/benchmarks.md: {len(text.splitlines())} lines, at most {MAX_LINES}", file=sys.stderr)
        return 2
    PAGE.write_text(text)
    CHIP_WAITING.write_text(chip_waiting())
    print(f"wrote {PAGE} and the reference files under {SLUG_DIR.name}/docs/reference/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
