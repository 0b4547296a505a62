"""Baking helpers shared by the template's tests and benchmarks: cookiecutter's own API, temporary folders."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from cookiecutter.main import cookiecutter

TEMPLATE = Path(__file__).resolve().parent.parent
DEFAULT_SLUG = "tpu_text_classifier"


def load_module(path: Path):
    """A Python file of the template that is no package's module (a script, a bake's test helper), imported."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_tool(name: str):
    """One of the template's tools/*.py scripts, imported as a module (they are scripts, not a package)."""
    return load_module(TEMPLATE / "tools" / f"{name}.py")


def template_defaults() -> dict:
    return json.loads((TEMPLATE / "cookiecutter.json").read_text())


def bake_into(output_dir: Path, template: Path = TEMPLATE, **answers) -> Path:
    return Path(cookiecutter(str(template), no_input=True, extra_context=answers, output_dir=str(output_dir)))


def pip(*args: str, cwd: Path | None = None, python: str = sys.executable) -> str:
    """`python -m pip ARGS` in `cwd` (this environment's pip by default); fail with its output unless it succeeded."""
    result = subprocess.run([python, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def durations_args(name: str) -> list[str]:
    """pytest arguments that write a run's durations as JUnit XML where DURATIONS names a folder (make test sets it;
    tools/durations.py tabulates them); none otherwise."""
    folder = os.environ.get("DURATIONS")
    return [f"--junitxml={Path(folder) / f'{name}.xml'}", "-o", f"junit_suite_name={name}"] if folder else []


def suite_env(**extra) -> dict:
    """This process's environment for a baked project's own pytest run, without pytest-xdist's worker variables.

    Under `make test` this process is an xdist worker, and pytest-benchmark (5.x, session.py) takes an inherited
    PYTEST_XDIST_WORKER for xdist being active in the child too: it would disable every benchmark there."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_XDIST_")}
    return {**env, **extra}


def run_baked_tests(project: Path, *pytest_args: str, name: str, python: str = sys.executable) -> str:
    """Run a baked project's own pytest suite inside it; fail unless it passed with nothing skipped.

    `name` names the suite in the durations table; `python`, the environment's interpreter (this one's by default)."""
    env = suite_env(PJRT_DEVICE="CPU", REQUIRE_XLA="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *durations_args(name), *pytest_args],
        cwd=project, env=env, capture_output=True, text=True, timeout=3600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary, summary
    return summary
