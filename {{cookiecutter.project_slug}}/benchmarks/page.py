"""The benchmark page, drawn from one results file: the seed's two answers with their pictures, then each other group
in one line linking its full table.

    python -m benchmarks.page                 # your last run (benchmark-results/results.json) beside the reference
    python -m benchmarks.page --reference     # docs/ again from docs/reference-results.json (the template's run)

Every run of the suite writes benchmark-results/benchmarks.md with its pictures and full tables (conftest.py calls
write()); the first command draws it again. docs/benchmarks.md is the same page for the reference run, committed
with the template; tests/test_benchmark_page.py fails when a figure on it differs from docs/reference-results.json.
"""

import argparse
import re
import sys
from pathlib import Path

from . import answers as answering
from . import results_file
from .findings import findings
from .reports import markdown

PAGE_NAME = "benchmarks.md"
TABLES_NAME = "benchmark-tables.md"


def picture_name(answer) -> str:
    return f"benchmarks-{answer.key}.png"


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def _table(answer) -> list[str]:
    lines = ["| " + " | ".join(answer.header) + " |", "|" + "---|" * len(answer.header)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in answer.rows]


def about(run: dict, name: str) -> str:
    devices = ", ".join(run.get("devices") or ["unknown device"])
    wall = f", the suite {run['suite_wall_s']:.0f} s" if run.get("suite_wall_s") else ""
    features = results_file.cpu_words(run.get("cpu") or {})
    where = f"{run['machine']} ({features})" if features else run["machine"]
    return (f"{name}: the {run['profile']} profile, {run['made']}, on {where}, Python {run['python']}, "
            f"device {devices}{wall}.")


def answer_sections(run: dict, beside: dict | None = None) -> list[str]:
    """The two answers as markdown (the template's page shows them too)."""
    lines = []
    theirs = {answer.key: answer for answer in answering.answers(results_file.records(beside))} if beside else {}
    for answer in answering.answers(results_file.records(run)):
        lines += [f"## {answer.question}", "", *_table(answer), "", *answer.says, "",
                  f"![{answer.question}]({picture_name(answer)})", ""]
        if answer.key in theirs:
            lines += [f"The reference run's answer ({beside['made']}, {beside['machine']}):", "",
                      *_table(theirs[answer.key]), ""]
    return lines


def page(run: dict, *, reference: bool, beside: dict | None = None) -> str:
    name = "The reference run" if reference else "This run"
    source = "docs/reference-results.json" if reference else f"benchmark-results/{results_file.RESULTS_NAME}"
    lines = [
        "# Benchmarks at a glance", "",
        f"{about(run, name)} Every figure on this page is generated from {source} by `python -m benchmarks.page"
        + (" --reference`" if reference else "`") + "; tests/test_benchmark_page.py fails when one differs from the "
        "file." + (" Your own run (`python -m pytest benchmarks`) writes this page for itself into "
                   "benchmark-results/, with the reference's answers beside its own." if reference else ""),
        "", "Step times measured on XLA:CPU compare the rows of one table on this CPU; they say nothing of a TPU's. "
        "The TPU columns are the TPU compiler's answer (libtpu, deviceless), not a TPU's run.", "",
        *answer_sections(run, beside=beside),
        "## Every other group in one line", "",
    ]
    lines += [f"- **{group}** ([full table]({TABLES_NAME}#{anchor(group)})): {text}" for group, text in findings(
        results_file.records(run))]
    return "\n".join([*lines, "", *RUNNING]) + "\n"


# How to make a run of your own: commands, no figures.
RUNNING = [
    "## Your own run", "",
    "```bash",
    "PJRT_DEVICE=CPU HF_HUB_OFFLINE=1 REQUIRE_XLA=1 python -m pytest benchmarks --benchmark-json benchmark-results/quick.json",
    "python -m benchmarks.page   # the last run's page again, with the reference's answers beside its own",
    "```", "",
    "On a TPU host use `PJRT_DEVICE=TPU` and `--bench-profile full` (or `BENCH_PROFILE=full`). With the `plan` extra "
    "installed, `BENCH_TPU=1` (always in the full profile) adds the TPU compiler's answer without a TPU (plan.py "
    "--rehearse, [plan.md](plan.md#rehearse)). The benchmarks marked `timing` time loops against each other: run them "
    "with nothing else on the machine (`python -m pytest benchmarks -m timing`), since another job moves their ratios. "
    "`REQUIRE_XLA=1` makes a mode that does not reach the graph fail instead of skip. Each run writes "
    f"benchmark-results/: {results_file.RESULTS_NAME} (the run, plain JSON), {PAGE_NAME} (this page for it), "
    f"{TABLES_NAME} (every group's full table), results.md, summary.md and results.png; CI "
    "(.github/workflows/benchmarks.yml) runs the same command and keeps them.",
]


def write(run: dict, folder: Path, *, reference: bool, beside: dict | None = None) -> dict[str, Path]:
    """The page, its pictures and the full tables of `run` into `folder`."""
    from .page_figures import draw

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = {"page": folder / PAGE_NAME, "tables": folder / TABLES_NAME}
    written["page"].write_text(page(run, reference=reference, beside=beside))
    written["tables"].write_text(tables(run))
    for answer in answering.answers(results_file.records(run)):
        written[answer.key] = draw(answer, folder / picture_name(answer))
    return written


def tables(run: dict) -> str:
    return markdown(results_file.records(run), f"Every benchmark's figures ({about(run, 'the run')})") + "\n"


def reference_beside(project: Path, run_path: Path) -> dict | None:
    path = project / results_file.REFERENCE
    return results_file.load(path) if path.is_file() and path.resolve() != run_path.resolve() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.page", description=__doc__.splitlines()[0])
    parser.add_argument("--reference", action="store_true", help="draw docs/ from docs/reference-results.json")
    parser.add_argument("--results", type=Path, help="the results file (default: your last run's, or the reference's)")
    args = parser.parse_args(argv)
    project = Path.cwd()
    path = args.results or (project / (results_file.REFERENCE if args.reference else
                                       Path("benchmark-results") / results_file.RESULTS_NAME))
    if not path.is_file():
        print(f"error: results: {path} is not there (run `python -m pytest benchmarks` first)", file=sys.stderr)
        return 2
    run = results_file.load(path)
    folder = project / ("docs" if args.reference else "benchmark-results")
    beside = None if args.reference else reference_beside(project, path)
    for kind, written in write(run, folder, reference=args.reference, beside=beside).items():
        print(f"{kind}: {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
