"""What the eval batch size, the last batch and the padding add in compilations to a run that trained,
and four training loops side by side: the project's, Accelerate's NLP example, and transformers' Trainer
as a user writes it and with its TPU settings.
"""

import functools

import pytest

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES, check_file
from {{ cookiecutter.project_slug }}.tasks.text_classification import label_checks

from . import grid, isolation, measure_rehearsal, profiles, rounds
from .measure_recompilation import (
    accelerate_example_loop,
    eval_cell,
    interleaved_comparison,
    project_loop,
    trainer_loop,
)


def demo_eval_set_size() -> int:
    config = TrainConfig()
    return check_file(DEMO_FILES["eval"], ["text"], label_checks(config.label_column, config.num_labels))


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        profile = profiles.choose(metafunc.config.getoption("--bench-profile"))
        cells = grid.build(TrainConfig().per_chip_train_batch(True, 1), demo_eval_set_size(), profile.full_grid)
        metafunc.parametrize("cell", cells, ids=[cell.id for cell in cells])


def default_cell() -> grid.Cell:
    (cell,) = [cell for cell in grid.build(TrainConfig().per_chip_train_batch(True, 1), demo_eval_set_size(), False) if cell.is_default]
    return cell


@pytest.fixture(scope="module")
def cells() -> dict:
    """Results by cell id: the default (first in the grid) is what every other cell is compared with."""
    return {}


@pytest.fixture(scope="module")
def tpu_scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("tpu")


@pytest.mark.benchmark(group="recompilation: eval batching")
def test_eval_cell(benchmark, profile, cell, cells, tpu_scratch):
    result = benchmark.pedantic(isolation.run, args=(eval_cell, cell, profile), rounds=1, iterations=1)
    cells[cell.id] = result
    default = cells.get(default_cell().id) or cells.setdefault(
        default_cell().id, isolation.run(eval_cell, default_cell(), profile)
    )
    added = result["eval_compilations"] - default["eval_compilations"]
    benchmark.extra_info.update(result, headline="graphs_added_over_default", graphs_added_over_default=added)
    assert result["train_compilations"] == default["train_compilations"], "the training steps are the same"
    assert result["compilations_after_first_eval"] == 0, "a later evaluation met a shape the first did not"
    whole = result["eval_set_size"] - result["eval_set_size"] % cell.eval_batch_size
    expected = whole if cell.last_batch == "drop" else result["eval_set_size"]
    assert result["examples_counted"] == expected
    if cell.padding == "fixed" and cell.last_batch in ("pad", "drop"):
        # One batch shape: evaluation compiles its one graph whatever the size (dropping loses examples instead).
        assert added == 0, result
    elif cell.padding == "buckets":
        assert added <= 3, result  # at most one more graph per bucket length (4 buckets)
    else:
        assert added >= 1, result  # a ragged last batch, dynamic padding: new shapes
    # The same choice as the TPU's compiler sees it: the project's run with the cell's eval batch size and padding
    # (plan.py --rehearse for one v5e and one v6e chip): the evaluation graphs it compiles, each with its compile
    # seconds and peak. As many as this cell compiled here.
    if why := measure_rehearsal.not_rehearsed(profile):
        benchmark.extra_info["tpu_eval_compile_s_v5e_1"] = f"n/a: {why}"
        return
    part = measure_rehearsal.eval_part(cell, profile, tpu_scratch)
    benchmark.extra_info["tpu"] = part
    if "why_none" in part:
        benchmark.extra_info["tpu_eval_compile_s_v5e_1"] = f"n/a: {part['why_none']}"
        return
    benchmark.extra_info["tpu_eval_compile_s_v5e_1"] = part["v5e-1"]["eval_compile_seconds"]
    for target in part.values():
        assert len(target["eval_graphs"]) == result["eval_compilations"], (target["eval_graphs"], result)
        assert all(graph["peak_bytes"] > 0 and graph["compile_seconds"] > 0 for graph in target["eval_graphs"]), target


@pytest.fixture(scope="module")
def loops(tmp_path_factory) -> dict:
    return {"folder": tmp_path_factory.mktemp("loops")}


def compare(benchmark, loops, result) -> None:
    """Record a loop's figures and its ratios to the project's loop (measured first, in the same run)."""
    project = loops["project"]
    loops[result["loop"]] = result
    ratios = {
        "compilations_vs_project": result["compilations"] / project["compilations"],
        "wall_vs_project": result["wall_s"] / project["wall_s"],
        "steady_step_vs_project": result["steady_step_s"] / project["steady_step_s"]
        if result["steady_step_s"] and project["steady_step_s"] else None,
    }
    benchmark.extra_info.update(result, headline="compilations", **ratios)


@pytest.mark.benchmark(group="recompilation: loops")
def test_project_loop(benchmark, profile, loops):
    result = benchmark.pedantic(
        isolation.run, args=(project_loop, profile, str(loops["folder"] / "project")), rounds=1, iterations=1
    )
    loops["project"] = result
    compare(benchmark, loops, result)
    assert result["recompilations"] == 0 and result["recompilation_causes"] == "none"
    assert result["steady_step_s"] > 0


@pytest.mark.benchmark(group="recompilation: loops")
def test_project_loop_without_the_watch(benchmark, profile, loops):
    """What the watch costs: the same run with --watch_compilations false, in the same session."""
    result = benchmark.pedantic(
        isolation.run, args=(project_loop, profile, str(loops["folder"] / "no-watch"), False), rounds=1, iterations=1
    )
    compare(benchmark, loops, result)
    # Both runs timed the same way: the epochs after the first, compile time taken out.
    benchmark.extra_info["steady_speed_watch_off_over_on"] = (
        result["steady_examples_per_second"] / loops["project"]["steady_examples_per_second"]
    )
    assert result["compilations"] == loops["project"]["compilations"], "the watch compiled a graph"
    assert result["device_to_host_transfers"] == loops["project"]["device_to_host_transfers"], "the watch read the device"


@pytest.mark.benchmark(group="recompilation: loops")
def test_accelerate_example_loop(benchmark, profile, loops):
    folder = str(loops["folder"] / "example")
    result = benchmark.pedantic(isolation.run, args=(accelerate_example_loop, profile, folder), rounds=1, iterations=1)
    compare(benchmark, loops, result)
    assert result["compilations"] > loops["project"]["compilations"]
    assert result["recompilations"] > 0


@pytest.mark.benchmark(group="recompilation: loops")
@pytest.mark.parametrize("tuned", [False, True], ids=["trainer-as-written", "trainer-tpu-tuned"])
def test_trainer_loop(benchmark, profile, loops, tuned):
    folder = str(loops["folder"] / f"trainer-{tuned}")
    result = benchmark.pedantic(isolation.run, args=(trainer_loop, profile, folder, tuned), rounds=1, iterations=1)
    compare(benchmark, loops, result)
    assert result["compilations"] > loops["project"]["compilations"]


@pytest.mark.benchmark(group="logging: cost")
@pytest.mark.parametrize("loop", ["project-no-logs", "project-log-every-step", "trainer-tpu-tuned-log-every-step"])
def test_logging_cost(benchmark, profile, loops, loop):
    """The steady step time with a log at every step against none, in one run: the project's loop, whose log is read
    on a thread of its own, and the TPU-tuned Trainer, whose log is a host read (`.item()`) in its loop."""
    folder = str(loops["folder"] / loop)
    if loop.startswith("project"):
        logging = functools.partial(project_loop, logging_steps=0 if loop == "project-no-logs" else 1)
        result = benchmark.pedantic(isolation.run, args=(logging, profile, folder, True, loop), rounds=1, iterations=1)
        never = loops.get("project-no-logs", result)
    else:
        result = benchmark.pedantic(isolation.run, args=(trainer_loop, profile, folder, True, 1), rounds=1, iterations=1)
        never = loops.get("trainer-tpu-tuned") or isolation.run(trainer_loop, profile, folder + "-never", True)
    loops[loop] = result
    ratio = result["steady_step_s"] / never["steady_step_s"] if result["steady_step_s"] and never["steady_step_s"] else None
    benchmark.extra_info.update(result, headline="steady_step_vs_no_logs", steady_step_vs_no_logs=ratio,
                                no_logs_steady_step_s=never["steady_step_s"])
    assert result["steady_step_s"] and result["steady_step_s"] > 0
    if loop == "project-log-every-step":
        # The same graphs, and only the logs' own reads: two per log (the loss sums and the gradient norm).
        assert result["logs"] > 0 and result["compilations"] == never["compilations"]
        assert result["device_to_host_transfers"] == never["device_to_host_transfers"] + 2 * result["logs"]


@pytest.mark.benchmark(group="loops: steady step against the tuned Trainer")
@pytest.mark.timing
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_steady_step_against_the_tuned_trainer(benchmark, profile, loops, precision):
    """The project's loop and the TPU-tuned Trainer, one after the other, `profile.steady_rounds` times, each round
    in the other order than the last (a machine that slows down over the rounds favours neither): a single run's
    steady step moves with whatever else the machine runs, a ratio of runs side by side much less. Marked `timing`:
    `make test` runs it with nothing else running. The watch's cost with against without it is in the loops' group
    (test_project_loop_without_the_watch); here its own checks are timed inside each run."""
    folder, bf16 = loops["folder"] / f"interleaved-{precision}", precision == "bf16"
    project = functools.partial(project_loop, mixed_precision="bf16" if bf16 else "no")
    runs = benchmark.pedantic(rounds.alternating, args=(
        profile.steady_rounds,
        lambda index: isolation.run(project, profile, str(folder / f"project-{index}"), True,
                                    "project-bf16" if bf16 else "project"),
        lambda index: isolation.run(trainer_loop, profile, str(folder / f"trainer-{index}"), True, 0, bf16),
    ), rounds=1, iterations=1)
    figures = interleaved_comparison(*runs)
    benchmark.extra_info.update(figures, precision=precision, device=runs[0][0]["device"],
                                headline="steady_step_vs_tuned_trainer")
    assert figures["rounds"] == profile.steady_rounds
    # The project's loop compiles the same graphs in every round, none of them after warm-up.
    assert len({run["compilations"] for run in runs[0]}) == 1 and {run["recompilations"] for run in runs[0]} == {0}
    # The ratios are figures of the report, compared in this one run (never a timed assertion here).


@pytest.mark.benchmark(group="recompilation: compilation cache")
def test_compilation_cache_warm_run(benchmark, profile, tmp_path):
    """The project's default eval cell twice over one persistent cache: a TPU reads it back, the CPU cannot."""
    cell = default_cell()
    cold = isolation.run(eval_cell, cell, profile, str(tmp_path))
    warm = benchmark.pedantic(isolation.run, args=(eval_cell, cell, profile, str(tmp_path)), rounds=1, iterations=1)
    benchmark.extra_info.update(
        warm, headline="cache_hits", cold_cache_misses=cold["cache_misses"],
        cold_compile_seconds=cold["eval_compile_seconds"],
    )
    if warm["cache_read_failures"]:
        benchmark.extra_info["reason"] = (
            f"{warm['cache_read_failures']} cached graph(s) could not be read back on {warm['device']}: "
            "the persistent cache saved nothing here"
        )
    assert cold["cache_misses"] >= 1, "the cold run wrote nothing to the cache"
    # Every graph of the warm run was looked up on disk: found, or found and unreadable.
    assert warm["cache_hits"] + warm["cache_read_failures"] >= 1
