"""Bake the template through cookiecutter's own API into temporary folders."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
DEFAULT_SLUG = "tpu_text_classifier"


def template_defaults() -> dict:
    return json.loads((TEMPLATE / "cookiecutter.json").read_text())


def bake_into(output_dir: Path, template: Path = TEMPLATE, **answers) -> Path:
    return Path(cookiecutter(str(template), no_input=True, extra_context=answers, output_dir=str(output_dir)))


@pytest.fixture
def bake(tmp_path):
    """Bake with the given answers (defaults otherwise); return the project folder."""

    def _bake(**answers) -> Path:
        return bake_into(tmp_path / "baked", **answers)

    return _bake


@pytest.fixture(scope="session")
def default_project(tmp_path_factory) -> Path:
    return bake_into(tmp_path_factory.mktemp("default"))


def run_baked_tests(project: Path, *pytest_args: str) -> str:
    """Run a baked project's own pytest suite inside it; fail unless it passed with nothing skipped."""
    env = {**os.environ, "PJRT_DEVICE": "CPU", "REQUIRE_XLA": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=project, env=env, capture_output=True, text=True, timeout=3600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary, summary
    return summary
