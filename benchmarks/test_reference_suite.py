"""The baked project's benchmark suite, quick profile, run as a user runs it; results kept in benchmark-results/.

The suite runs in its own interpreter (its measurements fork children from a parent that
never touched an XLA device, which this pytest process cannot promise). Its JSON, table
and plot are copied here; `python tools/update_readme_results.py` puts the table in README.md.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "benchmark-results"
PRECISION = [f"demo-{mode}" for mode in ("fp32", "xla-use-bf16", "xla-downcast-bf16", "model-cast", "autocast")]
PRECISION += ["mid-fp32", "mid-model-cast"]
GRID = [
    "eval16-train-pad-fixed", "eval32-2x-train-pad-fixed", "eval8-half-train-pad-fixed",
    "eval25-non-divisor-pad-fixed", "eval16-train-drop-fixed", "eval16-train-ragged-fixed",
    "eval16-train-pad-buckets", "eval16-train-pad-dynamic",
]
EXPECTED = {
    **{f"test_precision_mode[{case}]": "precision" for case in PRECISION},
    **{f"test_eval_cell[{cell}]": "recompilation: eval batching" for cell in GRID},
    "test_accelerate_example_loop": "recompilation: loops",
    "test_project_loop": "recompilation: loops",
    "test_compilation_cache_warm_run": "recompilation: compilation cache",
}
FIGURES = {
    "precision": ("mode", "model", "status", "graph_types", "device"),
    "precision ok": ("step_median_s", "compilations", "compile_seconds", "steady_compilations", "param_bytes",
                     "optimizer_bytes", "state_bytes", "final_loss"),
    "recompilation: eval batching": ("compilations", "compile_seconds", "first_eval_s", "steady_eval_s",
                                     "eval_wall_s", "examples_counted", "eval_batch_size", "last_batch", "padding"),
    "recompilation: loops": ("loop", "compilations", "compile_seconds", "wall_s", "eval_accuracy"),
    "recompilation: compilation cache": ("cache_hits", "cache_misses", "cache_read_failures", "cold_cache_misses"),
}
COPIED = ("quick.json", "results.md", "results.png")


def test_quick_profile(baked_default, summary):
    out = baked_default / "benchmark-results"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REQUIRE_XLA": "1", "BENCH_PROFILE": "quick"}
    env.setdefault("PJRT_DEVICE", "CPU")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider", f"--benchmark-json={out / 'quick.json'}"],
        check=False, cwd=baked_default, env=env, capture_output=True, text=True, timeout=1800,
    )
    wall = time.perf_counter() - started
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]

    RESULTS.mkdir(exist_ok=True)
    for name in COPIED:
        shutil.copy2(out / name, RESULTS / name)
    (RESULTS / "run.json").write_text(json.dumps({"profile": "quick", "suite_wall_s": round(wall, 1)}) + "\n")

    benchmarks = {entry["name"]: entry for entry in json.loads((out / "quick.json").read_text())["benchmarks"]}
    # Other benchmarks of the suite (shared-model memory) may be there too; these must be.
    assert not set(EXPECTED) - set(benchmarks), sorted(set(EXPECTED) - set(benchmarks))
    for name, group in EXPECTED.items():
        info = benchmarks[name]["extra_info"]
        assert benchmarks[name]["group"] == group
        wanted = FIGURES.get(group, ()) + (FIGURES["precision ok"] if group == "precision" and info["status"] == "ok" else ())
        missing = [key for key in wanted if key not in info]
        assert not missing, f"{name}: extra_info lacks {missing}"
        if group == "precision" and info["status"] != "ok":
            assert info["reason"], name
    assert benchmarks["test_precision_mode[demo-fp32]"]["extra_info"]["status"] == "ok"
    project = benchmarks["test_project_loop"]["extra_info"]
    assert project["example_to_project_compilations"] >= 1

    summary.append(f"suite wall time {wall:.0f} s; JSON, table and plot copied to {RESULTS}")
    summary.extend(suite_summary(result.stdout))


def suite_summary(stdout: str) -> list[str]:
    """The lines the suite printed under its "Benchmark results (...)" heading."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "Benchmark results (" in line), len(lines))
    kept = []
    for line in lines[start + 1:]:
        if line.startswith(("=", "-", "table:", "plot:")):
            break
        kept.append(line)
    return kept
