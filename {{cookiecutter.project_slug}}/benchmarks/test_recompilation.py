"""What the eval batch size, the last batch and the padding cost in compilations and time,
and the loop of Accelerate's own NLP example side by side with the project's loop.
"""

import pytest

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data import DEMO_FILES, check_file

from . import grid, isolation, profiles
from .measure_recompilation import accelerate_example_loop, eval_cell, project_loop


def demo_eval_set_size() -> int:
    config = TrainConfig()
    return check_file(DEMO_FILES["eval"], ["text"], config.label_column, config.num_labels)


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        profile = profiles.choose(metafunc.config.getoption("--bench-profile"))
        cells = grid.build(TrainConfig().train_batch_size, demo_eval_set_size(), profile.full_grid)
        metafunc.parametrize("cell", cells, ids=[cell.id for cell in cells])


@pytest.mark.benchmark(group="recompilation: eval batching")
def test_eval_cell(benchmark, profile, cell):
    result = benchmark.pedantic(isolation.run, args=(eval_cell, cell, profile), rounds=1, iterations=1)
    benchmark.extra_info.update(result, headline="compilations")
    assert result["compilations"] >= 1
    assert result["compilations_after_first_eval"] == 0, "a later evaluation met a shape the first did not"
    whole = result["eval_set_size"] - result["eval_set_size"] % cell.eval_batch_size
    expected = whole if cell.last_batch == "drop" else result["eval_set_size"]
    assert result["examples_counted"] == expected


@pytest.fixture(scope="module")
def loops(tmp_path_factory) -> dict:
    return {"folder": tmp_path_factory.mktemp("loops")}


@pytest.mark.benchmark(group="recompilation: loops")
def test_accelerate_example_loop(benchmark, profile, loops):
    folder = str(loops["folder"] / "example")
    result = benchmark.pedantic(isolation.run, args=(accelerate_example_loop, profile, folder), rounds=1, iterations=1)
    loops["accelerate-example"] = result
    benchmark.extra_info.update(result, headline="compilations")
    assert result["compilations"] >= 1


@pytest.mark.benchmark(group="recompilation: loops")
def test_project_loop(benchmark, profile, loops):
    folder = str(loops["folder"] / "project")
    result = benchmark.pedantic(isolation.run, args=(project_loop, profile, folder), rounds=1, iterations=1)
    loops["project"] = result
    baseline = loops.get("accelerate-example") or isolation.run(
        accelerate_example_loop, profile, str(loops["folder"] / "example")
    )
    benchmark.extra_info.update(
        result, headline="compilations",
        example_to_project_compilations=baseline["compilations"] / result["compilations"],
        example_to_project_wall=baseline["wall_s"] / result["wall_s"],
    )
    assert 1 <= result["compilations"] <= baseline["compilations"]
    assert result["cache_misses"] is not None, "the compilation cache was asked for but not on"


@pytest.mark.benchmark(group="recompilation: compilation cache")
def test_compilation_cache_warm_run(benchmark, profile, tmp_path):
    """The project's default eval cell twice over one persistent cache: a TPU reads it back, the CPU cannot."""
    cell = next(cell for cell in grid.build(TrainConfig().train_batch_size, demo_eval_set_size(), False) if cell.is_default)
    cold = isolation.run(eval_cell, cell, profile, str(tmp_path))
    warm = benchmark.pedantic(isolation.run, args=(eval_cell, cell, profile, str(tmp_path)), rounds=1, iterations=1)
    benchmark.extra_info.update(
        warm, headline="cache_hits", cold_compilations=cold["compilations"],
        cold_compile_seconds=cold["compile_seconds"], cold_cache_misses=cold["cache_misses"],
    )
    if warm["cache_read_failures"]:
        benchmark.extra_info["reason"] = (
            f"{warm['cache_read_failures']} cached graph(s) could not be read back on {warm['device']}: "
            "the persistent cache saved nothing here"
        )
    assert cold["cache_misses"] >= 1, "the cold run wrote nothing to the cache"
    # Every graph of the warm run was looked up on disk: found, or found and unreadable.
    assert warm["cache_hits"] + warm["cache_read_failures"] >= 1
