"""How long baking the template takes (target: well under two seconds)."""

import shutil
import tempfile
from pathlib import Path

from tests.baking import bake_into


def bake_once() -> Path:
    output = Path(tempfile.mkdtemp(prefix="bake-time-"))
    try:
        return bake_into(output)
    finally:
        shutil.rmtree(output, ignore_errors=True)


def test_bake_with_defaults(benchmark):
    project = benchmark.pedantic(bake_once, rounds=5, iterations=1, warmup_rounds=1)
    assert project.name == "tpu_text_classifier"
    benchmark.extra_info["target_seconds"] = 2.0
    benchmark.extra_info["median_seconds"] = benchmark.stats.stats.median
