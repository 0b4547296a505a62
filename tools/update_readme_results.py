"""Put the latest quick-profile tables (written by `make test`) into README.md, one section per task.

benchmark-results/summary.md is the default (text-classification) bake's; benchmark-results/causal-lm/ the
causal-LM bake's.

The README shows the suite's own view (at most 8 columns a table, each with the sentence it supports);
the full tables stay in benchmark-results/results.md and the JSON.

Only the text between a section's markers (`<!-- results:start -->` ... `<!-- results:end -->`, and
`<!-- results-causal-lm:start -->` ...) changes; missing markers are added at the end.
Usage: python tools/update_readme_results.py [README.md] [benchmark-results]
"""

import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## Latest benchmark results"
# (results folder below benchmark-results/, marker name, what the section is)
SECTIONS = (("", "results", "text-classification (the default bake)"), ("causal-lm", "results-causal-lm", "causal-lm"))


def machine(results: Path) -> str:
    run = json.loads((results / "quick.json").read_text())
    info = run.get("machine_info", {})
    cpu = info.get("cpu", {}) or {}
    cores = cpu.get("count")
    brand = cpu.get("brand_raw") or info.get("processor") or info.get("machine") or platform.machine()
    when = run.get("datetime", "")[:16].replace("T", " ")
    where = f"{brand}, {cores} cores" if cores else brand
    return f"measured {when} UTC on {where}, Python {info.get('python_version', '?')}"


def section(results: Path, start: str, end: str, task: str) -> str:
    table = (results / "summary.md").read_text().strip().splitlines()
    title = table[0].lstrip("# ").strip()  # "Benchmark results (quick profile, xla:CPU)"
    extra = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    wall = f"; the whole quick suite took {extra['suite_wall_s']:.0f} s" if "suite_wall_s" in extra else ""
    body = ["#" + line if line.startswith("## ") else line for line in table[1:]]
    folder = results.relative_to(results.parents[1]) if results.name != "benchmark-results" else Path(results.name)
    intro = (
        f"{title}, {machine(results)}{wall}. Every figure below is generated from that run: regenerate "
        f"with `make test` then `make results`. Full tables: {folder}/results.md; the figure: {folder}/results.png."
    )
    body = ["#" + line if line.startswith("### ") else line for line in body]
    return "\n".join([start, "", f"### {task}", "", intro, *body, "", end])


def update(readme: Path, results_root: Path) -> None:
    text = readme.read_text()
    for sub_folder, marker, task in SECTIONS:
        results = results_root / sub_folder if sub_folder else results_root
        if not (results / "summary.md").exists():
            continue
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        new = section(results, start, end, task)
        if start in text and end in text:
            before, _, rest = text.partition(start)
            _, _, after = rest.partition(end)
            text = before + new + after
        elif HEADING in text:
            text = text.rstrip("\n") + f"\n\n{new}\n"
        else:
            text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{new}\n"
    readme.write_text(text)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    update(Path(arguments[0]) if arguments else ROOT / "README.md",
           Path(arguments[1]) if len(arguments) > 1 else ROOT / "benchmark-results")
