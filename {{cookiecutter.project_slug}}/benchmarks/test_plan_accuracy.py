"""Plan against the TPU compiler: is plan.py's estimate of a step's peak memory per device the TPU compiler's?

`--bench-profile plan` (architectures at their real size, ROWS: minutes a row, an hour or more in all on two CPU
cores, so no other profile runs them) holds every row to the criterion: the estimate within TOLERANCE of the
compiler's peak and the same "fits", or no estimate at all with the plan's reason ("compile to know"), never a wrong
figure. Fitted rows and out-of-sample ones (measure_plan.Row.role) are held alike; each row's result is kept in
RESULTS_NAME in the results folder, from which docs/plan.md's table is written. The quick profile compiles a narrowed
model (QUICK_ROWS, seconds): the group runs and the compiler's figures come back; at that size the peak is mostly the
compiler's own padding and code, so its ratio is recorded, not held to the target.
"""

import datetime
import os
import platform
from importlib.metadata import version

import pytest

from . import profiles
from .conftest import results_folder
from .measure_plan import QUICK_ROWS, RESULTS_NAME, ROWS, keep, measure, model_folder

GROUP = "plan against the TPU compiler"
TOLERANCE = 0.15


def pytest_generate_tests(metafunc):
    if "row" in metafunc.fixturenames:
        profile = profiles.choose(metafunc.config.getoption("--bench-profile"))
        rows = ROWS if profile.name == "plan" else QUICK_ROWS
        metafunc.parametrize("row", rows, ids=[row.name for row in rows])


def within(result: dict) -> str | None:
    """Why a row misses the criterion, or None where it holds."""
    if result["estimate_peak_gib"] is None:
        return None if result["estimate_why"] else "no estimate and no reason"
    if abs(result["estimate_over_compiler"] - 1) > TOLERANCE:
        return f"estimate {result['estimate_peak_gib']:.2f} GiB, compiler {result['compiler_peak_gib']:.2f} GiB"
    if result["estimate_fits"] != result["compiler_fits"]:
        return f"the estimate says fits={result['estimate_fits']}, the compiler {result['compiler_fits']}"
    return None


@pytest.mark.benchmark(group=GROUP)
def test_plan_against_the_tpu_compiler(benchmark, profile, row, tmp_path, pytestconfig):
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs it)")
    benchmark.extra_info.update(headline="estimate_over_compiler", row=row.name, role=row.role)
    real = profile.name == "plan"
    folder = model_folder(tmp_path / "model", narrowed=not real, model=row.model)
    result = benchmark.pedantic(measure, args=(row, folder, tmp_path / "plan.json", None if real else 32),
                                rounds=1, iterations=1)
    benchmark.extra_info.update({key: value for key, value in result.items() if key != "row"})
    assert result["compiler_peak_gib"] > 0 and result["compile_seconds"] > 0
    if real:
        keep(results_folder(pytestconfig) / RESULTS_NAME, row.name, result, datetime.date.today().isoformat(),
             f"{platform.machine()}, {os.cpu_count()} cores, libtpu {version('libtpu')}")
        missed = within(result)
        assert missed is None, f"{row.name} ({row.role}): {missed}"
