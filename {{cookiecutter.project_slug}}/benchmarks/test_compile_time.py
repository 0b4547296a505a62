"""Compile time at full layer count: the TPU compiler's seconds for the default model's whole step, its layers as
written against its layers scanned (measure_compile_time.py). `--bench-profile compile` at the real size (minutes a
row; no other profile runs it); the quick profile narrowed to 4 layers (seconds: the rows compile)."""

import pytest

from . import isolation
from .measure_compile_time import ROWS, measure

GROUP = "compile time: layers as written against scanned"


@pytest.mark.benchmark(group=GROUP)
@pytest.mark.parametrize("row", ROWS)
def test_compile_time_of_the_step_with_its_layers_scanned(benchmark, profile, row):
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs it)")
    benchmark.extra_info.update(headline="compile_seconds", row=row)
    # In a forked child: jax and libtpu loaded in this process would hang every later benchmark's fork (their threads
    # do not survive one).
    result = benchmark.pedantic(isolation.run, args=(measure, row, profile.name != "compile"), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    assert result["compile_seconds"] > 0 and result["peak_gib"] > 0
