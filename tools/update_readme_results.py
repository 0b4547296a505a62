"""Put the latest quick-profile tables (written by `make test`) into README.md, one section per task.

benchmark-results/summary.md is the default (text-classification) bake's; benchmark-results/causal-lm/ the
causal-LM bake's.

The README shows the suite's own view (at most 8 columns a table, each with the sentence it supports);
the full tables stay in benchmark-results/results.md and the JSON.

Only the text between a section's markers (`<!-- results:start -->` ... `<!-- results:end -->`, and
`<!-- results-causal-lm:start -->` ...) changes; missing markers are added at the end.

The Models table (`<!-- models:start -->` ... `<!-- models:end -->`) comes from benchmark-results/models/*.json, the
architecture matrix's rows that each bake's tests/test_models.py writes when MODEL_MATRIX_RESULTS names that folder;
missing markers are added before the benchmark results.

The LM loops table (`<!-- lm-loops:start -->` ... `<!-- lm-loops:end -->`) comes from benchmark-results/causal-lm/quick.json:
the causal-LM bake's loop against TRL's SFTTrainer (its benchmarks/test_lm_loops.py), with how the loops differ.
Usage: python tools/update_readme_results.py [README.md] [benchmark-results]
"""

import json
import platform
import sys
from datetime import datetime, timezone
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


def update_models(text: str, folder: Path) -> str:
    new = models_section(folder)
    if new is None:
        return text
    start, end = MODELS
    if start in text and end in text:
        before, _, rest = text.partition(start)
        _, _, after = rest.partition(end)
        return before + new + after
    if HEADING in text:
        before, _, after = text.partition(HEADING)
        return f"{before}{new}\n\n{HEADING}{after}"
    return text.rstrip("\n") + f"\n\n{new}\n"


LM_LOOPS = ("<!-- lm-loops:start -->", "<!-- lm-loops:end -->")
LM_LOOPS_GROUP = "causal-lm: loops"
LM_LOOPS_COLUMNS = ("Loop", "Status", "XLA graphs", "Recompilations (causes)", "Compile s", "Steady tokens/s",
                    "Wall s", "vs project: graphs, tokens/s, wall")


def _ratio(value) -> str:
    return "n/a" if value is None else f"×{value:.2g}"


def lm_loops_section(results: Path) -> str | None:
    """The LM loops table (the causal-LM bake's benchmarks/test_lm_loops.py) from its quick.json, or None."""
    path = results / "quick.json"
    if not path.exists():
        return None
    rows = [entry["extra_info"] for entry in json.loads(path.read_text())["benchmarks"]
            if entry.get("group") == LM_LOOPS_GROUP]
    if not rows:
        return None
    lines = [LM_LOOPS[0], "", "| " + " | ".join(LM_LOOPS_COLUMNS) + " |", "|" + "---|" * len(LM_LOOPS_COLUMNS)]
    for row in rows:
        if row.get("status") != "ok":
            status = f"did not run here: {row.get('reason', '?')}".replace("|", "\\|")
            lines.append("| " + " | ".join([row["loop"], status, *["n/a"] * (len(LM_LOOPS_COLUMNS) - 2)]) + " |")
            continue
        causes = row["recompilation_causes"].replace("|", "\\|")
        devices = row.get("devices", 1)
        cells = (
            row["loop"], f"ok ({devices} device{'s' if devices != 1 else ''})", _figure(row["graphs"]),
            f"{row['recompilations']} ({causes})", _figure(row["compile_seconds"], 1),
            _figure(row["steady_tokens_per_second"]), _figure(row["wall_s"], 1),
            ", ".join(_ratio(row.get(key)) for key in
                      ("graphs_vs_project", "tokens_per_second_vs_project", "wall_vs_project")),
        )
        lines.append("| " + " | ".join(cells) + " |")
    first = rows[0]
    lines += ["", f"Workload: {first.get('optimizer_steps')} optimizer steps of {first.get('global_batch')} packed "
              f"blocks of {first.get('max_seq_length')} tokens, float32 ({machine(results)}). How the loops differ "
              "(everything else is the same):", ""]
    lines += [f"- **{row['loop']}**: {row['differences']}." for row in rows]
    lines += ["", LM_LOOPS[1]]
    return "\n".join(lines)


def update_lm_loops(text: str, results: Path) -> str:
    new = lm_loops_section(results)
    if new is None:
        return text
    start, end = LM_LOOPS
    if start in text and end in text:
        before, _, rest = text.partition(start)
        _, _, after = rest.partition(end)
        return before + new + after
    anchor = "<!-- results-causal-lm:start -->"
    if anchor in text:  # beside the other loop table, before the causal-LM results
        before, _, after = text.partition(anchor)
        return f"{before}{new}\n\n{anchor}{after}"
    return text.rstrip("\n") + f"\n\n{new}\n"


def update(readme: Path, results_root: Path) -> None:
    text = update_models(readme.read_text(), results_root / "models")
    text = update_lm_loops(text, results_root / "causal-lm")
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
