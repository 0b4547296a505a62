"""How long baking the template takes (target: well under two seconds)."""

import shutil
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent


def bake_once() -> Path:
    output = Path(tempfile.mkdtemp(prefix="bake-time-"))
    try:
        return Path(cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(output)))
    finally:
        shutil.rmtree(output, ignore_errors=True)


def test_bake_with_defaults(benchmark):
    project = benchmark.pedantic(bake_once, rounds=5, iterations=1, warmup_rounds=1)
    assert project.name == "tpu_text_classifier"
    benchmark.extra_info["target_seconds"] = 2.0
    benchmark.extra_info["median_seconds"] = benchmark.stats.stats.median
