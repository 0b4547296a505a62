"""The baked project's benchmark suite, quick profile, run as a user runs it; results kept in benchmark-results/.

The suite runs in its own interpreter (its measurements fork children from a parent that
never touched an XLA device, which this pytest process cannot promise). Its JSON, table
and plot are copied here; `python tools/update_readme_results.py` puts the table in docs/benchmarks.md.

The benchmarks the bake marks `timing` (loops timed against each other in rounds) run apart, in the tests marked
`alone`: `make test` runs those after everything else, with nothing beside them, because the other suites on the
second core moved a round's ratio by up to half; their results go to benchmark-results/alone/ (and causal-lm/alone/).
"""

import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.baking import TEMPLATE, bake_into, durations_args, load_module, suite_env

RESULTS = Path(__file__).resolve().parent.parent / "benchmark-results"
# How the bake's tests compare two runs' numbers (plain Python, no template text): the bounds checked here too.
COMPARING = load_module(TEMPLATE / "{{cookiecutter.project_slug}}" / "tests" / "comparing.py")
PRECISION = [f"demo-{mode}" for mode in ("fp32", "xla-use-bf16", "xla-downcast-bf16", "model-cast", "autocast")]
PRECISION += ["mid-fp32", "mid-model-cast"]
GRID = [
    "eval16-train-pad-fixed", "eval32-2x-train-pad-fixed", "eval8-half-train-pad-fixed",
    "eval25-non-divisor-pad-fixed", "eval16-train-drop-fixed", "eval16-train-ragged-fixed",
    "eval16-train-pad-buckets", "eval16-train-pad-dynamic",
]
LOOPS = {
    "test_project_loop": "project", "test_project_loop_without_the_watch": "project-no-watch",
    "test_accelerate_example_loop": "accelerate-example", "test_trainer_loop[trainer-as-written]": "trainer",
    "test_trainer_loop[trainer-tpu-tuned]": "trainer-tpu-tuned",
}
# The project's loop against the TPU-tuned Trainer, in rounds run one after the other, in both precisions.
STEADY = {f"test_steady_step_against_the_tuned_trainer[{precision}]": precision for precision in ("fp32", "bf16")}
ROUNDS = 3  # the quick profile's steady_rounds
# The fine-tuning comparison of the precision levels: both tasks' suites have it.
FINE_TUNING = ("fp32", "bf16", "pure-bf16-xla", "pure-bf16-xla+kahan", "pure-bf16-downcast", "pure-bf16-downcast+kahan",
               "pure-bf16-cast")
FINE_TUNING_EXPECTED = {f"test_finetuning_level[{level}]": "precision: fine-tuning" for level in FINE_TUNING}
EXPECTED = {
    **{f"test_precision_mode[{case}]": "precision" for case in PRECISION},
    **FINE_TUNING_EXPECTED,
    **{f"test_eval_cell[{cell}]": "recompilation: eval batching" for cell in GRID},
    **{name: "recompilation: loops" for name in LOOPS},
    "test_compilation_cache_warm_run": "recompilation: compilation cache",
    "test_step_checkpoint_cost": "checkpoints",
    **{f"test_fsdp_devices[{devices}]": "fsdp: devices" for devices in (1, 2, 4)},
    "test_lora_against_full_fine_tuning": "lora",
}
# The causal-LM bake's loop comparison (benchmarks/test_lm_loops.py): the project's loop against TRL's SFTTrainer.
LM_LOOPS = ("project", "project-fsdp", "sft-as-written", "sft-runs-on-xla", "sft-tpu-example")
LM_LOOPS_EXPECTED = {f"test_lm_loop[{loop}]": "causal-lm: loops" for loop in LM_LOOPS}
LM_LEAD = "test_tokens_per_second_against_sfttrainer"
# results.json is the run as the reference is made of it (tools/reference_run.py); benchmarks.md, its page.
COPIED = ("quick.json", "results.json", "results.md", "summary.md", "results.png", "benchmarks.md", "benchmark-tables.md")


def run_suite(project: Path, results: Path, name: str, marks: str = "not timing"):
    """Run a baked project's quick benchmark suite as a user does, the benchmarks `marks` selects; copy its results
    to `results`.

    Returns (the benchmarks by name, the suite's output, its wall seconds).
    """
    out = project / "benchmark-results"
    env = suite_env(HF_HUB_OFFLINE="1", REQUIRE_XLA="1", BENCH_PROFILE="quick")
    env.setdefault("PJRT_DEVICE", "CPU")
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-p", "no:cacheprovider", "-m", marks,
         f"--benchmark-json={out / 'quick.json'}", *durations_args(name)],
        check=False, cwd=project, env=env, capture_output=True, text=True, timeout=1800,
    )
    wall = time.perf_counter() - started
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    results.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copy2(out / name, results / name)
    (results / "run.json").write_text(json.dumps({"profile": "quick", "suite_wall_s": round(wall, 1)}) + "\n")
    view = (out / "summary.md").read_text()
    for line in view.splitlines():
        if line.startswith("| benchmark"):
            assert line.count("|") - 1 <= 8, line  # at most 8 columns in the README's tables
    benchmarks = {entry["name"]: entry for entry in json.loads((out / "quick.json").read_text())["benchmarks"]}
    return benchmarks, result.stdout, wall


@pytest.mark.slow(first=5)
@pytest.mark.compares("float32", "the bake's results again: FSDPv2's eval loss over 2 and 4 devices against one; "
                      "fp32's and bf16's eval loss against the host's float32 re-evaluation (bf16's resolution)")
def test_quick_profile(baked_default, summary):
    benchmarks, stdout, wall = run_suite(baked_default, RESULTS, "benchmarks-default")
    # Other benchmarks of the suite (shared-model memory) may be there too; these must be.
    assert not set(EXPECTED) - set(benchmarks), sorted(set(EXPECTED) - set(benchmarks))
    for name, group in EXPECTED.items():
        assert benchmarks[name]["group"] == group, name
    info = {name: entry["extra_info"] for name, entry in benchmarks.items()}
    check_eval_batching({cell: info[f"test_eval_cell[{cell}]"] for cell in GRID})
    check_precision({case: info[f"test_precision_mode[{case}]"] for case in PRECISION})
    check_fine_tuning({level: info[f"test_finetuning_level[{level}]"] for level in FINE_TUNING})
    check_loops({loop: info[name] for name, loop in LOOPS.items()})
    assert not set(STEADY) & set(benchmarks), "the timed comparison runs alone (test_loops_timed_alone)"
    check_fsdp({devices: info[f"test_fsdp_devices[{devices}]"] for devices in (1, 2, 4)})
    check_lora(info["test_lora_against_full_fine_tuning"])
    saving = info["test_step_checkpoint_cost"]
    assert saving["compilations"] == saving["compilations_epochs_only"] and saving["seconds_per_save"] > 0
    summary.append(f"suite wall time {wall:.0f} s; JSON, table and plot copied to {RESULTS}")
    summary.extend(suite_summary(stdout))


@pytest.mark.slow(first=1)
@pytest.mark.compares("float32", "the causal-LM bake's results again: as test_quick_profile's")
def test_causal_lm_quick_profile(tmp_path_factory, summary):
    """The causal-LM bake's suite: packed against padded batches, FSDPv2 over 1, 2 and 4 devices, fine-tuning levels."""
    project = bake_into(tmp_path_factory.mktemp("bench-causal-lm"), task="causal-lm")
    results = RESULTS / "causal-lm"
    benchmarks, stdout, wall = run_suite(project, results, "benchmarks-causal-lm")
    expected = {**FINE_TUNING_EXPECTED, **LM_LOOPS_EXPECTED, "test_lora_against_full_fine_tuning": "lora",
                **{f"test_generation[{where}]": "causal-lm: generation" for where in ("device", "host")}}
    assert not set(expected) - set(benchmarks), sorted(set(expected) - set(benchmarks))
    for name, group in expected.items():
        assert benchmarks[name]["group"] == group, name
    info = {name: entry["extra_info"] for name, entry in benchmarks.items()}
    check_lm_loops({loop: info[f"test_lm_loop[{loop}]"] for loop in LM_LOOPS})
    assert LM_LEAD not in benchmarks, "the timed comparison runs alone (test_loops_timed_alone)"
    check_fine_tuning({level: info[f"test_finetuning_level[{level}]"] for level in FINE_TUNING})
    packing = {padding: info[f"test_packing[{padding}]"] for padding in ("fixed", "longest", "dynamic")}
    assert packing["fixed"]["train_padding_fraction"] == 0 < packing["longest"]["train_padding_fraction"]
    assert packing["fixed"]["recompilations"] == packing["longest"]["recompilations"] == 0
    assert packing["dynamic"]["compilations"] > packing["fixed"]["compilations"]
    # Tokens per second are the table's figures, not asserted: this suite runs beside another (-n 2).
    generation = {where: info[f"test_generation[{where}]"] for where in ("device", "host")}
    assert (generation["device"]["graphs"], generation["host"]["graphs"]) == (2, 0)
    assert generation["device"]["new_tokens"] == generation["host"]["new_tokens"] > 0
    check_fsdp({devices: info[f"test_fsdp_devices[{devices}]"] for devices in (1, 2, 4)})
    check_lora(info["test_lora_against_full_fine_tuning"])
    summary.append(f"causal-lm suite wall time {wall:.0f} s; JSON, table and plot copied to {results}")
    summary.extend(suite_summary(stdout))


@pytest.mark.slow
@pytest.mark.alone
@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_loops_timed_alone(tmp_path_factory, summary, task):
    """The benchmarks each bake marks `timing`: the project's loop against the tuned Trainer in both precisions, the
    causal-LM loop's lead over SFTTrainer; timed with nothing else running (`make test` runs them last)."""
    lm = task == "causal-lm"
    project = bake_into(tmp_path_factory.mktemp(f"timed-{task}"), task=task)
    results = RESULTS / "causal-lm" / "alone" if lm else RESULTS / "alone"
    benchmarks, stdout, wall = run_suite(project, results, f"benchmarks-{task}-alone", marks="timing")
    expected = {LM_LEAD: "causal-lm: lead over SFTTrainer"} if lm else {
        name: "loops: steady step against the tuned Trainer" for name in STEADY}
    assert set(benchmarks) == set(expected), sorted(benchmarks)
    for name, group in expected.items():
        assert benchmarks[name]["group"] == group, name
        if lm:
            check_lm_lead(benchmarks[name]["extra_info"])
        else:  # the quick profile's rounds, a ratio from each
            check_against_the_tuned_trainer(benchmarks[name]["extra_info"], STEADY[name])
    summary.append(f"{task} timed benchmarks, alone: {wall:.0f} s; copied to {results}")
    summary.extend(suite_summary(stdout))


def check_lora(row: dict) -> None:
    """What the README says of LoRA: under a tenth of the parameters trained, under a tenth of the optimizer state,
    and no graph added."""
    assert row["trainable_parameters_lora"] < row["total_parameters_lora"] / 10
    assert row["optimizer_bytes_per_device_lora"] < row["optimizer_bytes_per_device_full"] / 10
    assert row["compilations_lora"] == row["compilations_full"] == 2


def check_eval_batching(cells: dict) -> None:
    """What the README says of eval batching, as the results say it."""
    added = {cell: info["graphs_added_over_default"] for cell, info in cells.items()}
    for cell in ("eval16-train-pad-fixed", "eval32-2x-train-pad-fixed", "eval8-half-train-pad-fixed",
                 "eval25-non-divisor-pad-fixed"):
        assert added[cell] == 0, (cell, added[cell])  # evaluation compiles its own graph at any size
    assert added["eval16-train-pad-dynamic"] > added["eval16-train-ragged-fixed"] > added["eval16-train-pad-fixed"]
    assert added["eval16-train-drop-fixed"] == 0
    assert cells["eval16-train-drop-fixed"]["examples_counted"] < cells["eval16-train-drop-fixed"]["eval_set_size"]
    for cell, info in cells.items():
        assert info["compilations_after_first_eval"] == 0, cell


def check_precision(cases: dict) -> None:
    """bf16 halves what the device stores (read from the graph); downcast keeps float64 as float32."""
    for case, info in cases.items():
        assert info["status"] == "ok", (case, info.get("reason"))
    fp32 = cases["demo-fp32"]["state_bytes"]
    for mode in ("xla-use-bf16", "xla-downcast-bf16", "model-cast"):
        assert cases[f"demo-{mode}"]["state_bytes"] <= 0.55 * fp32, mode
    assert cases["demo-autocast"]["state_bytes"] == fp32  # autocast computes in bf16 but stores float32
    assert cases["mid-model-cast"]["state_bytes"] <= 0.55 * cases["mid-fp32"]["state_bytes"]
    assert cases["demo-xla-downcast-bf16"]["graph_types"].startswith("f32->bf16, f64->f32")
    assert cases["demo-xla-use-bf16"]["graph_types"].startswith("f32->bf16, f64->bf16")
    assert cases["demo-fp32"]["graph_types"].startswith("f32->f32, f64->f64")


def check_fine_tuning(levels: dict) -> None:
    """What the fine-tuning table says: the default bf16 keeps at least 99 % of the updates, as fp32 does; each
    pure bf16 level without compensation keeps fewer, in half the state bytes; Kahan summation brings the update's
    norm closer to fp32's, for one more weight-sized buffer."""
    rate = {info["learning_rate"] for info in levels.values()}
    assert rate in ({2e-5}, {1e-5}), rate  # the task's fine-tuning rate, the same in every level
    assert len({info["optimizer_steps"] for info in levels.values()}) == 1  # the same steps
    fp32, default = levels["fp32"], levels["bf16"]
    assert fp32["fraction_changed"] >= 0.99 and default["fraction_changed"] >= 0.99
    assert fp32["state_bytes_per_device"] == default["state_bytes_per_device"]  # float32 weights and AdamW state
    for level in ("pure-bf16-xla", "pure-bf16-downcast", "pure-bf16-cast"):
        plain, kahan = levels[level], levels.get(f"{level}+kahan")
        assert plain["fraction_changed"] < default["fraction_changed"], level
        assert plain["state_bytes_per_device"] <= 0.55 * fp32["state_bytes_per_device"], level
        if kahan:
            assert abs(kahan["update_norm_vs_fp32"] - 1) < abs(plain["update_norm_vs_fp32"] - 1), level
            assert plain["state_bytes_per_device"] < kahan["state_bytes_per_device"] < fp32["state_bytes_per_device"]
    # The reported eval loss against the export re-evaluated in float32 on the host: two programs, within float32's
    # bound for one forward (fp32) or bf16's resolution (bf16 evaluates under autocast), as the bake's
    # tests/comparing.py derives them.
    for level, bound in (("fp32", COMPARING.float32_apart(1)), ("bf16", COMPARING.BF16_RESOLUTION)):
        assert levels[level]["eval_loss_gap_to_host"] < bound, level
    for level, info in levels.items():
        assert math.isfinite(info["eval_loss"]), level


def check_loops(loops: dict) -> None:
    """The project's loop compiles fewest graphs and none after warm-up; the loops users pick instead do not."""
    project = loops["project"]
    assert project["recompilations"] == 0
    assert loops["project-no-watch"]["compilations"] == project["compilations"]
    assert loops["accelerate-example"]["recompilations"] > 0
    assert loops["trainer"]["compilations"] > loops["trainer-tpu-tuned"]["compilations"] > project["compilations"]
    assert loops["accelerate-example"]["compilations"] > project["compilations"]


def check_against_the_tuned_trainer(steady: dict, precision: str) -> None:
    """The project's loop is faster than the TPU-tuned Trainer, per steady step and in wall time, in float32 and in
    the default bf16 autocast: medians of the rounds' ratios, each round's runs side by side
    (benchmarks/measure_recompilation.interleaved_comparison), run with nothing else running (test_loops_timed_alone).

    Held below 1, not at "The fastest loop"'s 0.9 and 0.8: with the other suites on the second core the median of
    the quick profile's 3 rounds moved from 0.76 to 0.97 (float32's steady step) over five fresh clones; alone, one
    run of a loop still moves 10-25 % from the next on this shared 2-core machine (six runs of the same project
    loop back to back: steady step 0.081-0.126 s), and the median of 3 rounds alone moved from 0.70 to 0.90 over four
    runs of the same code (float32's steady step): too near 0.9 to hold it there. The tables report where each run
    lands. The watch's own checks, timed inside each run, are held within 5 % of the run."""
    assert steady["precision"] == precision and steady["rounds"] == ROUNDS, steady
    assert 0 < steady["steady_step_vs_tuned_trainer"] < 1, steady
    assert 0 < steady["wall_vs_tuned_trainer"] < 1, steady
    assert steady["project_steady_step_s"] > 0 and steady["trainer_steady_step_s"] > 0, steady
    assert 0 < steady["watch_host_share"] < 0.05, steady


def check_lm_loops(loops: dict) -> None:
    """The project's loop, on one device or FSDPv2 over four, compiles 2 graphs and none after warm-up; every
    SFTTrainer set-up that trains here compiles more; one that does not says why."""
    project = loops["project"]
    assert project["status"] == loops["project-fsdp"]["status"] == "ok"
    assert project["graphs"] == loops["project-fsdp"]["graphs"] == 2
    assert project["recompilations"] == loops["project-fsdp"]["recompilations"] == 0
    # The comparison has SFTTrainer figures: with the two settings it needs on XLA, it trains here.
    assert loops["sft-runs-on-xla"]["status"] == "ok", loops["sft-runs-on-xla"].get("reason")
    for loop, info in loops.items():
        if info["status"] == "ok":
            assert info["steady_tokens_per_second"] > 0, loop
        else:
            assert info["reason"], loop
        if loop.startswith("sft") and info["status"] == "ok":
            assert info["graphs"] > project["graphs"], loop


def check_lm_lead(lead: dict) -> None:
    """The project's loop trains more tokens per second than SFTTrainer: the median of the rounds' ratios, each
    round's runs side by side (benchmarks/rounds.py in the bake).

    Held above 1, not at "The fastest loop"'s 3.9: that figure was one run of each loop in one `make test`, and
    single runs there gave 2.9 to 3.95; the table reports where each run's median lands."""
    assert lead["rounds"] == ROUNDS and lead["against"] == "sft-runs-on-xla", lead
    assert lead["tokens_per_second_lead"] > 1, lead
    assert lead["project_tokens_per_second"] > 0 and lead["sft_tokens_per_second"] > 0, lead


def check_fsdp(runs: dict) -> None:
    """FSDPv2 over more devices: each holds its share of the training state, in the same graphs, same result."""
    for devices, info in runs.items():
        assert info["state_bytes_vs_whole"] < 1 / devices * 1.01, devices
        assert info["compilations"] == runs[1]["compilations"], devices
        # Another program than one device's: within float32's bound for the run's steps (the bake's tests/comparing.py).
        apart = COMPARING.float32_apart(runs[1]["optimizer_steps"]) * runs[1]["eval_loss"]
        assert abs(info["eval_loss"] - runs[1]["eval_loss"]) <= apart, devices
    assert runs[4]["state_bytes_per_device"] < runs[2]["state_bytes_per_device"] < runs[1]["state_bytes_per_device"]


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
