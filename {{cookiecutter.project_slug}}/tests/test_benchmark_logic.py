"""The benchmark suite's own logic: grid, profiles, element-type check, counters, isolation, fine-tuning
comparison, reports, memory.

Cheap on purpose: only the tests marked xla touch an XLA device, each in a child process for a few seconds.
"""

import functools
import json
import os
import subprocess
import sys
from dataclasses import replace
from itertools import product

import pytest
from conftest import TASK, python_code, run

from benchmarks import (
    graph_types,
    grid,
    isolation,
    measure_finetuning,
    measure_plan,
    measure_quality,
    profiles,
    reports,
)
from benchmarks.records import Record
from {{ cookiecutter.project_slug }}.config import DEFAULT_MODEL, PADDING_MODES
from {{ cookiecutter.project_slug }}.data.batching import LAST_BATCH_POLICIES
from {{ cookiecutter.project_slug }}.precision.levels import PROMISED_TYPES
from {{ cookiecutter.project_slug }}.watch import memory

EVAL_SET_SIZE = 120  # data/demo/eval.csv


# Grid -----------------------------------------------------------------------------------------

def test_eval_sizes_cover_the_four_cases():
    sizes = grid.eval_sizes(16, EVAL_SET_SIZE)
    assert sizes["train"] == 16 and sizes["2x-train"] == 32 and sizes["half-train"] == 8
    assert EVAL_SET_SIZE % sizes["non-divisor"] != 0
    assert len(set(sizes.values())) == 4


@pytest.mark.parametrize(("train", "eval_set"), [(16, 120), (8, 64), (1, 7), (32, 96)])
def test_non_divisor_never_divides(train, eval_set):
    size = grid.eval_sizes(train, eval_set)["non-divisor"]
    assert eval_set % size != 0


def test_full_grid_is_every_combination_once():
    cells = grid.build(16, EVAL_SET_SIZE, full=True)
    combos = {(cell.size_label, cell.last_batch, cell.padding) for cell in cells}
    assert len(cells) == len(combos) == 36
    assert combos == set(product(grid.SIZE_LABELS, LAST_BATCH_POLICIES, PADDING_MODES))
    assert len({cell.id for cell in cells}) == 36


def test_quick_grid_moves_one_factor_at_a_time_from_the_default():
    cells = grid.build(16, EVAL_SET_SIZE, full=False)
    assert len(cells) < 36
    default = [cell for cell in cells if cell.is_default]
    assert len(default) == 1
    for cell in cells:
        differences = sum(a != b for a, b in zip((cell.size_label, cell.last_batch, cell.padding), grid.DEFAULT, strict=True))
        assert differences == (0 if cell.is_default else 1), cell.id
    assert {cell.size_label for cell in cells} == set(grid.SIZE_LABELS)
    assert {cell.last_batch for cell in cells} == set(LAST_BATCH_POLICIES)
    assert {cell.padding for cell in cells} == set(PADDING_MODES)


# Profiles -------------------------------------------------------------------------------------

def test_profile_choice(monkeypatch):
    monkeypatch.delenv(profiles.PROFILE_VARIABLE, raising=False)
    assert profiles.choose(None).name == "quick"
    monkeypatch.setenv(profiles.PROFILE_VARIABLE, "full")
    assert profiles.choose(None).name == "full"
    assert profiles.choose("quick").name == "quick"
    with pytest.raises(ValueError, match="must be one of"):
        profiles.choose("huge")


def test_the_interleaved_comparison_takes_a_ratio_per_round_then_their_median():
    from benchmarks.measure_recompilation import interleaved_comparison

    project = [{"steady_step_s": 0.09, "wall_s": 6.0}, {"steady_step_s": 0.12, "wall_s": 9.0},
               {"steady_step_s": 0.08, "wall_s": 6.4}]
    trainer = [{"steady_step_s": 0.10, "wall_s": 5.0}, {"steady_step_s": 0.10, "wall_s": 9.0},
               {"steady_step_s": 0.10, "wall_s": 8.0}]
    for figures, watching in zip(project, (0.06, 0.09, 0.032), strict=True):
        figures["watch_seconds"] = watching
    found = interleaved_comparison(project, trainer)
    # Per round: 0.9, 1.2, 0.8 (steady) and 1.2, 1.0, 0.8 (wall): each round's two runs met the same load.
    assert found["steady_step_vs_tuned_trainer"] == pytest.approx(0.9) and found["steady_ratio_range"] == "0.8-1.2"
    assert found["wall_vs_tuned_trainer"] == pytest.approx(1.0) and found["wall_ratio_range"] == "0.8-1.2"
    assert (found["project_steady_step_s"], found["trainer_steady_step_s"], found["rounds"]) == (0.09, 0.10, 3)
    # The watch's own time in each watched run: 0.06 of 6, 0.09 of 9 and 0.032 of 6.4 seconds.
    assert found["watch_host_share"] == pytest.approx(0.01)
    with pytest.raises(ValueError):
        interleaved_comparison(project, trainer[:2])  # a round without its pair


def test_rounds_alternate_which_loop_runs_first():
    from benchmarks.rounds import alternating

    order = []
    mine, theirs = alternating(3, lambda index: order.append(("mine", index)) or index,
                               lambda index: order.append(("theirs", index)) or -index)
    assert order == [("mine", 0), ("theirs", 0), ("theirs", 1), ("mine", 1), ("mine", 2), ("theirs", 2)]
    assert (mine, theirs) == ([0, 1, 2], [0, -1, -2])


def test_a_comparison_over_rounds_is_the_median_of_each_rounds_ratio_with_their_range():
    from benchmarks.rounds import over_rounds

    # Ratios 2, 4 and 3: the median of the ratios, not the ratio of the medians (6/2 = 3 here too, 5/1 would not be).
    assert over_rounds([4.0, 8.0, 6.0], [2.0, 2.0, 2.0]) == (3.0, "2-4")
    assert over_rounds([5.0, 1.0, 3.0], [1.0, 1.0, 3.0]) == (1.0, "1-5")
    with pytest.raises(ValueError):
        over_rounds([1.0, 2.0], [1.0])  # a round without its other run


def test_precision_cases_put_fp32_first_for_each_model():
    modes = list(graph_types.MODES)
    for name in ("quick", "full"):
        cases = profiles.choose(name).precision_cases(modes)
        for model in {model for model, _ in cases}:
            assert [mode for m, mode in cases if m == model][0] == "fp32"
    quick = profiles.choose("quick").precision_cases(modes)
    assert [mode for model, mode in quick if model == "demo"] == sorted(modes, key=lambda m: m != "fp32")
    full = profiles.choose("full").precision_cases(modes)
    assert len(full) == 2 * len(modes)


# Element types --------------------------------------------------------------------------------

IR_BF16 = """IR {
  %0 = f32[2,64]{1,0} xla::device_data(), xla_shape=f32[2,64]{1,0}
  %1 = bf16[8,64]{1,0} aten::mm(%0, %0), xla_shape=bf16[8,64]{1,0}
  %2 = bf16[8,2]{1,0} aten::addmm(%1, %0, %0), xla_shape=bf16[8,2]{1,0}
  %3 = bf16[2,8,8]{2,1,0} aten::matmul(%2, %2), xla_shape=bf16[2,8,8]{2,1,0}
  %4 = f32[] aten::sum(%3), xla_shape=f32[], ROOT=0
}"""


def test_matmul_types_reads_torch_xla_ir_text():
    assert graph_types.matmul_types(IR_BF16) == {"bf16": 3}
    assert graph_types.matmul_types(IR_BF16.replace("bf16", "f32")) == {"f32": 3}


def test_every_precision_level_is_a_mode():
    assert sorted(mode.xla_level for mode in graph_types.MODES.values()) == sorted(PROMISED_TYPES)


def test_check_accepts_a_mode_whose_graph_keeps_its_promise():
    assert graph_types.check(graph_types.MODES["autocast"], ("f32", "f64"), {"bf16": 54}) is None
    # precision.lowered_types adds the type of a matmul under autocast; the step's own matmuls are checked instead.
    assert graph_types.check(graph_types.MODES["autocast"], ("f32", "f64", "bf16"), {"bf16": 54}) is None
    assert graph_types.check(graph_types.MODES["xla-use-bf16"], ("bf16", "bf16", "bf16"), {"bf16": 54}) is None
    assert graph_types.check(graph_types.MODES["xla-downcast-bf16"], ("bf16", "f32"), {"bf16": 54}) is None
    assert graph_types.check(graph_types.MODES["fp32"], ("f32", "f64"), {"f32": 54}) is None


@pytest.mark.parametrize(
    ("mode", "probe", "matmuls", "says"),
    [
        ("xla-use-bf16", ("f32", "f64"), {"f32": 54}, "lower to f32/f64"),  # variable ignored
        ("xla-downcast-bf16", ("bf16", "bf16"), {"bf16": 54}, "expected bf16/f32"),  # the wrong variable
        ("model-cast", ("f32", "f64"), {"f32": 50, "bf16": 4}, "50 in f32 of 54 matmuls"),
        ("fp32", ("f32", "f64"), {}, "no matrix multiply"),
    ],
)
def test_check_names_what_did_not_reach_the_graph(mode, probe, matmuls, says):
    assert says in graph_types.check(graph_types.MODES[mode], probe, matmuls)


GRAPH_BYTES = """
import json, os, sys
os.environ["XLA_USE_BF16"] = sys.argv[1]
import torch, torch_xla
from benchmarks import graph_types
device = torch_xla.device()
tensors = [torch.zeros(10, 10).to(device), torch.zeros(5, dtype=torch.float64).to(device),
           torch.zeros(4, dtype=torch.int64).to(device)]
torch_xla.sync()
print(json.dumps([graph_types.graph_bytes(tensors), [str(tensor.dtype) for tensor in tensors]]))
"""


@pytest.mark.xla
@pytest.mark.parametrize(("use_bf16", "expected"), [("0", 400 + 40 + 32), ("1", 200 + 10 + 32)])
def test_graph_bytes_are_read_from_the_device_types_not_the_torch_dtype(use_bf16, expected):
    """Under XLA_USE_BF16 float32 and float64 are stored as bf16 while torch still says float32 and float64."""
    # The child sets XLA_USE_BF16 itself before the runtime starts, which reads it: it may be a fork (conftest.run).
    result = run(python_code(GRAPH_BYTES, use_bf16), timeout=300)
    found, dtypes = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == expected
    assert dtypes == ["torch.float32", "torch.float64", "torch.int64"]


# Isolation and the compile counters -----------------------------------------------------------

def raise_in_child():
    raise ValueError("broken on purpose")


def one_new_graph():
    """Run the same small graph twice; return the compilations counted around each run."""
    import torch
    import torch_xla

    from {{ cookiecutter.project_slug }}.watch import compilations

    counted = []
    for _ in range(2):
        with compilations.counting_compilations() as compiled:
            (torch.ones(3, 3, device=torch_xla.device()) * 7).sum().item()
        counted.append(compiled)
    return counted


def test_a_failing_child_reports_its_traceback():
    with pytest.raises(isolation.ChildFailed, match="broken on purpose"):
        isolation.run(raise_in_child)


@pytest.mark.xla
def test_every_child_starts_with_an_empty_graph_cache():
    """The counters reach the parent, and a second process compiles again: no state leaks between modes."""
    for _ in range(2):
        first, second = isolation.run(one_new_graph)
        assert first["compilations"] == 1 and first["compile_seconds"] > 0
        assert second["compilations"] == 0


@pytest.mark.xla
def test_a_precision_that_does_not_reach_the_graph_is_reported_failed_and_not_timed():
    from benchmarks.measure_precision import run_mode

    broken = graph_types.Mode("bf16-never-applied", "fp32", "bf16", how="bf16 promised, nothing applied")
    tiny = replace(profiles.choose("quick"), warmup_steps=1, timed_steps=1)
    result = isolation.run(run_mode, broken, "demo", tiny)
    assert result["status"] == "failed"
    assert "matmuls, expected all in bf16" in result["reason"]
    assert "step_median_s" not in result and "compilations" not in result


def affinity():
    return sorted(os.sched_getaffinity(0))


def test_runs_answer_in_order_of_asking_and_a_failure_stays_with_its_call():
    runs = isolation.Runs({"first": (affinity,), "broken": (raise_in_child,), "last": (affinity,)}, at_once=2)
    assert runs.result("last")  # asked for before the others: the calls before it are collected on the way
    with pytest.raises(isolation.ChildFailed, match="broken on purpose"):
        runs.result("broken")
    first, last = runs.result("first"), runs.result("last")
    shares = isolation.cpu_shares(2)
    assert first in shares and last in shares  # each child pinned to one share of the CPUs
    if len(shares) == 2:
        assert not set(shares[0]) & set(shares[1])
    with pytest.raises(KeyError):
        runs.result("never asked")


# The fine-tuning comparison ------------------------------------------------------------------

def test_updates_are_counted_where_the_level_stores_its_weights():
    import torch

    start = {"w": torch.tensor([[1.0, 1.001], [0.5, 0.001]])}
    # What bf16 weights start from: 1.001 rounds to 1.0 there, which is no update.
    rounded = {"w": start["w"].to(torch.bfloat16)}
    assert measure_finetuning.compare_weights(start, rounded, rounded_to_bf16=True)["fraction_changed"] == 0
    assert measure_finetuning.compare_weights(start, rounded, rounded_to_bf16=False)["fraction_changed"] > 0
    moved = {"w": torch.tensor([[1.0, 1.001], [0.5, 0.002]])}
    found = measure_finetuning.compare_weights(start, moved, rounded_to_bf16=False)
    assert found["fraction_changed"] == 0.25 and found["weight_elements"] == 4
    assert found["update_norm"] == pytest.approx(0.001, rel=1e-3)


def test_only_linear_layers_count_as_weight_matrices():
    import torch

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    assert list(measure_finetuning.linear_weights(model)) == ["1.weight"]


def test_every_level_is_a_choice_train_py_accepts():
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.precision.levels import requested_level

    for level, options in measure_finetuning.LEVELS.items():
        assert requested_level(TrainConfig(**options).precision) == level.removesuffix("+kahan")
    config = measure_finetuning.fine_tune_config("bf16", profiles.choose("quick"), "pretrained", "outputs")
    assert config.learning_rate == measure_finetuning.FINE_TUNING_RATE["text-classification"]
    assert config.demo is False and config.model_name_or_path == "pretrained" and config.train_file


# Reports --------------------------------------------------------------------------------------

def records():
    return [
        Record("precision", "demo-fp32", "passed", 3.0, {
            "mode": "fp32", "device": "xla:CPU", "status": "ok", "step_median_s": 0.25, "param_bytes": 2**21,
            "losses": [0.7, 0.6], "headline": "step_median_s",
        }),
        Record("precision", "demo-broken", "passed", 1.0, {
            "mode": "broken", "device": "xla:CPU", "status": "failed", "reason": "f32 | not bf16",
            "headline": "step_median_s",
        }),
        # A benchmark written later by someone else: nested extra_info, no headline.
        Record("shared model memory", "fork-2", "passed", 9.5, {"pss": {"total_mib": 812.5}, "workers": 2}),
    ]


def test_markdown_has_one_table_per_group_with_every_scalar():
    text = reports.markdown(records(), "Benchmark results (quick profile, xla:CPU)")
    assert text.startswith("# Benchmark results (quick profile, xla:CPU)")
    assert "## precision" in text and "## shared model memory" in text
    assert "Same in every row: device=xla:CPU" in text
    assert "| demo-fp32 | ok | fp32 | 0.25 | 2.0 MiB | 3 |" in text
    assert "failed: f32 \\| not bf16" in text  # the reason is shown, and cannot break the table
    assert "| fork-2 | ok | 812.5 | 2 | 9.5 |" in text
    assert "pss.total_mib" in text and "losses" not in text


def test_summary_names_each_headline_and_failure():
    lines = reports.summary(records())
    assert any("demo-fp32" in line and "step_median_s=0.25" in line for line in lines)
    assert any("demo-broken" in line and "failed" in line and "not bf16" in line for line in lines)
    assert any("fork-2" in line and "wall_s=9.5" in line for line in lines)


def test_readme_view_keeps_at_most_eight_columns_and_lists_the_loop_differences():
    figures = {"compilations": 4, "recompilations": 0, "compile_seconds": 5.2, "steady_step_s": 0.05, "wall_s": 7.0,
               "compilations_vs_project": 1.0, "wall_vs_project": 1.0, "eval_accuracy": 0.5, "device": "xla:CPU"}
    loops = [
        Record("recompilation: loops", "test_project_loop", "passed", 7.0,
               {**figures, "loop": "project", "differences": "fixed padding"}),
        Record("recompilation: loops", "test_accelerate_example_loop", "passed", 30.0,
               {**figures, "loop": "accelerate-example", "compilations": 33, "differences": "dynamic padding",
                "recompilation_causes": "train: new shapes at f (/tmp/x/benchmarks/a.py:3) x30; at g (torch_xla/b.py:1)"}),
    ]
    text = reports.view_markdown([*records(), *loops], "Benchmark results")
    (header,) = [line for line in text.splitlines() if line.startswith("| benchmark") and "compilations" in line]
    assert header == ("| benchmark | compilations | recompilations | compile_seconds (s) | steady_step_s (s) | wall_s (s) | "
                      "compilations_vs_project (x) | wall_vs_project (x) |")
    assert "| test_accelerate_example_loop | 33 | 0 | 5.2 | 0.05 | 7 | 1 | 1 |" in text
    assert "- **test_project_loop**: fixed padding." in text and "eval_accuracy" not in text
    # The watch's causes, under the table; an absolute path as its folder and file, a library's path as it was.
    assert "- **test_accelerate_example_loop**: train: new shapes at f (benchmarks/a.py:3) x30; at g (torch_xla/b.py:1)" in text
    assert reports.VIEWS["recompilation: loops"].says in text
    assert "shared model memory" not in text  # a group without a view stays in results.md only


def test_fine_tuning_view_shows_the_task_metric_it_has_in_eight_columns():
    rows = [Record("precision: fine-tuning", level, "passed", 1.0, {
        "level": level, "learning_rate": 2e-5, "fraction_changed": changed, "update_norm_vs_fp32": 1.0,
        "eval_accuracy": 0.98, "eval_loss_gap_to_host": 1e-8, "state_bytes_per_device": 494604, "steady_step_s": 0.1,
        "compilations": 3, "run_s": 9.0,
    }) for level, changed in (("fp32", 1.0), ("bf16", 1.0), ("pure-bf16-xla", 0.27))]
    text = reports.view_markdown(rows, "Benchmark results")
    (header,) = [line for line in text.splitlines() if line.startswith("| benchmark")]
    assert header == ("| benchmark | fraction_changed (fraction) | update_norm_vs_fp32 (x) | eval_accuracy | "
                      "eval_loss_gap_to_host (relative) | state_bytes_per_device | steady_step_s (s) | compilations |")
    assert "| pure-bf16-xla | 0.27 | 1 | 0.98 | 1e-08 | 0.47 MiB | 0.1 | 3 |" in text


def test_write_produces_the_table_and_a_png(tmp_path):
    tuned = Record("precision: fine-tuning", "bf16", "passed", 1.0, {"level": "bf16", "fraction_changed": 1.0})
    written = reports.write([*records(), tuned], tmp_path / "results", "Benchmark results")
    assert written["table"].read_text().startswith("# Benchmark results")
    assert written["summary"].read_text().startswith("# Benchmark results")
    assert written["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


BENCHMARK_FILE = '''
def test_sleepless(benchmark):
    benchmark.extra_info["compilations"] = 3
    benchmark.pedantic(sum, args=([1, 2],), rounds=2, iterations=1)
'''


def test_pytest_benchmark_compare_reads_two_saved_runs(tmp_path):
    (tmp_path / "test_tiny.py").write_text(BENCHMARK_FILE)
    saved = []
    # The inner runs are plain pytest runs: not xdist workers, whatever runs this test (pytest-benchmark turns itself
    # off where it sees xdist).
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    for name in ("first", "second"):
        path = tmp_path / f"{name}.json"
        ran = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_tiny.py"),
             f"--benchmark-json={path}"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
        )
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert json.loads(path.read_text())["benchmarks"][0]["extra_info"] == {"compilations": 3}
        saved.append(str(path))
    # The `pytest-benchmark compare` command, through this interpreter (its module has no __main__).
    command = "import sys; from pytest_benchmark.cli import main; sys.argv[0] = 'pytest-benchmark'; main()"
    compared = subprocess.run(
        [sys.executable, "-c", command, "compare", *saved], capture_output=True, text=True, timeout=300
    )
    assert compared.returncode == 0, compared.stderr
    assert compared.stdout.count("test_sleepless") == 2


@functools.cache
def collected(profile: str) -> list[str]:
    """The benchmark ids a profile collects (pytest --collect-only in a plain pytest run; once a profile: 5-7 s each)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    ran = subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "--bench-profile", profile], capture_output=True, text=True, timeout=300, env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    return [line for line in ran.stdout.splitlines() if "::" in line]


def test_the_quality_group_runs_in_its_own_profile_and_nowhere_else():
    """An hour of fine-tuning: every row at the pretrained rate, the Trainer and the project at the higher one, 3 seeds
    each, in --bench-profile quality alone; the quick profile (make test) never collects it."""
    quality = collected("quality")
    assert all(line.startswith("benchmarks/test_quality.py::") for line in quality)
    assert len(quality) == 3 * (len(measure_quality.ROWS) + 2) == 21
    assert "benchmarks/test_quality.py::test_trains_as_well_as_the_trainer[2e-05-trainer-seed0]" == quality[0]
    assert not [line for line in collected("quick") if "test_quality.py" in line]


def test_the_plan_group_compiles_the_real_size_in_its_own_profile_and_a_narrowed_model_in_the_quick_one():
    """--bench-profile plan alone: the default model at its real size (minutes a row), two batch sizes, both layouts,
    bf16 and float32, LoRA once, the rows the estimate was fitted to; then out-of-sample rows of the task's other
    architectures (and the length fit, bert-base-cased at 512 tokens, in the classifier's). make test's quick profile
    compiles the narrowed model once, sharded over 4 chips."""
    plan = collected("plan")
    assert [line.split("[")[1].rstrip("]") for line in plan] == [row.name for row in measure_plan.ROWS]
    assert all(line.startswith("benchmarks/test_plan_accuracy.py::") for line in plan)
    fits = [row for row in measure_plan.ROWS if row.role == "fit" and row.length == 128]
    assert {(row.layout, row.precision, row.batch) for row in fits if not row.lora_r} == {
        (layout, precision, batch) for layout in ("data", "fsdp") for precision in ("bf16", "no") for batch in (16, 32)}
    assert len(fits) == 9 and all(row.model == DEFAULT_MODEL for row in fits)
    checks = [row for row in measure_plan.ROWS if row.role == "check"]
    assert checks and all(row.task == TASK for row in checks) and len({row.name for row in measure_plan.ROWS}) == len(plan)
    quick = [line for line in collected("quick") if "test_plan_accuracy.py" in line]
    assert [line.split("[")[1].rstrip("]") for line in quick] == ["fsdp-bf16-8x128"]


def test_the_quality_text_is_labelled_by_mean_rating_and_split_once(tmp_path, monkeypatch):
    """The VADER ratings become 3 labels (<= -0.5, between, >= 0.5), shuffled once, 3,000 to train and 2,000 to
    evaluate, written once into the cache (a second call downloads nothing)."""
    import io
    import tarfile

    ratings = [-4.0, -0.5, -0.49, 0.0, 0.49, 0.5, 3.1] * 800  # 5,600 sentences
    lines = "".join(f"{index}\t{rating}\tsentence {index}, rated {rating}\n" for index, rating in enumerate(ratings))
    name, version, archive_path, member = measure_quality.TEXT_PACKAGE
    downloads = []

    def fake_download(package, release, into, source):
        downloads.append((package, release, source))
        inner = io.BytesIO()
        with tarfile.open(fileobj=inner, mode="w:gz") as data:
            payload = lines.encode()
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            data.addfile(info, io.BytesIO(payload))
        outer_path = into / f"{package}-{release}.tar.gz"
        with tarfile.open(outer_path, "w:gz") as outer:
            info = tarfile.TarInfo(f"{package}-{release}/{archive_path}")
            info.size = len(inner.getvalue())
            outer.addfile(info, io.BytesIO(inner.getvalue()))
        return outer_path

    monkeypatch.setenv("QUALITY_CACHE", str(tmp_path))
    monkeypatch.setattr(measure_quality, "_download", fake_download)
    text = measure_quality.real_text()
    assert downloads == [(name, version, True)]
    assert sum(text["train_labels"]) == 3000 and sum(text["eval_labels"]) == 2000
    import csv

    rows = {}
    for split in ("train_file", "eval_file"):
        with open(text[split], newline="", encoding="utf-8") as handle:
            rows[split] = list(csv.DictReader(handle))
    for row in rows["train_file"] + rows["eval_file"]:
        rating = float(row["text"].rpartition(" ")[2])
        assert int(row["label"]) == (0 if rating <= -0.5 else 2 if rating >= 0.5 else 1)
    assert not {row["text"] for row in rows["train_file"]} & {row["text"] for row in rows["eval_file"]}
    assert measure_quality.real_text() == text and len(downloads) == 1  # cached


HOLD_MEMORY = "import sys; data = b'x' * (64 * 2**20); print('ready', flush=True); sys.stdin.read()"


def test_peak_sampler_sums_the_pss_of_a_process_and_its_children():
    """psutil reads each process's Pss and walks the tree: a child holding 64 MiB of its own pages shows up."""
    assert memory.available()
    alone = memory.PeakSampler()
    alone.sample()
    child = subprocess.Popen([sys.executable, "-c", HOLD_MEMORY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert child.pid in memory.process_tree(alone.pid)
        with_child = memory.PeakSampler()
        # The parent's Pss read beside the sample: another process mapping the same libraries (a test run beside this
        # one) changes a process's share of them, and so its Pss, between readings taken further apart.
        before = memory.pss_bytes(alone.pid)
        with_child.sample()
        parent = min(before, memory.pss_bytes(alone.pid))
    finally:
        child.communicate("")
    assert with_child.peak.processes == alone.peak.processes + 1
    assert with_child.peak.pss_bytes - parent >= 64 * 2**20
    assert memory.pss_bytes(child.pid) is None  # ended: read as gone, not an error
