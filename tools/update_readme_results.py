"""Put the latest quick-profile tables (benchmark-results/summary.md, written by `make test`) into README.md.

The README shows the suite's own view (at most 8 columns a table, each with the sentence it supports);
the full tables stay in benchmark-results/results.md and the JSON.

Only the text between `<!-- results:start -->` and `<!-- results:end -->` changes; the markers
are added under a "## Latest benchmark results" heading at the end when absent.
Usage: python tools/update_readme_results.py [README.md] [benchmark-results]
"""

import json
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- results:start -->", "<!-- results:end -->"
HEADING = "## Latest benchmark results"


def machine(results: Path) -> str:
    run = json.loads((results / "quick.json").read_text())
    info = run.get("machine_info", {})
    cpu = info.get("cpu", {}) or {}
    cores = cpu.get("count")
    brand = cpu.get("brand_raw") or info.get("processor") or info.get("machine") or platform.machine()
    when = run.get("datetime", "")[:16].replace("T", " ")
    where = f"{brand}, {cores} cores" if cores else brand
    return f"measured {when} UTC on {where}, Python {info.get('python_version', '?')}"


def section(results: Path) -> str:
    table = (results / "summary.md").read_text().strip().splitlines()
    title = table[0].lstrip("# ").strip()  # "Benchmark results (quick profile, xla:CPU)"
    extra = json.loads((results / "run.json").read_text()) if (results / "run.json").exists() else {}
    wall = f"; the whole quick suite took {extra['suite_wall_s']:.0f} s" if "suite_wall_s" in extra else ""
    body = ["#" + line if line.startswith("## ") else line for line in table[1:]]
    intro = (
        f"{title}, {machine(results)}{wall}. Every figure below is generated from that run: regenerate with "
        "`make test` then `make results`. Full tables: benchmark-results/results.md; the figure: "
        "benchmark-results/results.png."
    )
    return "\n".join([START, "", intro, *body, "", END])


def update(readme: Path, results: Path) -> None:
    text = readme.read_text()
    new = section(results)
    if START in text and END in text:
        before, _, rest = text.partition(START)
        _, _, after = rest.partition(END)
        text = before + new + after
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{new}\n"
    readme.write_text(text)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    update(Path(arguments[0]) if arguments else ROOT / "README.md",
           Path(arguments[1]) if len(arguments) > 1 else ROOT / "benchmark-results")
