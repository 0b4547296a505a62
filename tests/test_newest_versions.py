"""A bake installed as its README says but without constraints.txt: pip takes the newest releases that the baked
pyproject.toml's ranges allow on the day, which the pinned environment (requirements.txt) does not run. Each task's
bake runs its fast tier and the tests that fine-tune a model saved with save_pretrained (marked `pretrained`) there,
as the baked project's own scheduled CI job `newest` does. A range that admits a release the project cannot run fails
here first.

The two bakes are also two of the answer sets whose fast tier tests/test_generated_project.py would run otherwise
(one per task: the script alone in float32, the notebook alone at XLA_USE_BF16), so this environment costs the suite
its install and the pretrained runs only. Both are installed into one new environment (the second install adds its
own package): one ~7 GB environment instead of two. NEWEST_VERSIONS (make test sets it) names a file for what
`pip freeze` gave.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.baking import bake_into, pip, run_baked_tests

NEWEST = {
    "script-float32-no-benchmarks": {"variants": "script", "mixed_precision": "no", "include_benchmarks": False},
    "causal-lm-xla-notebook-no-benchmarks": {"task": "causal-lm", "pure_bf16": "xla", "variants": "notebook",
                                             "include_benchmarks": False},
}
# What the report names; the template's pins say what the pinned environment has.
WATCHED = ("torch", "torch-xla", "accelerate", "transformers", "datasets", "tokenizers", "peft", "kernels")


@pytest.mark.slow(first=6)
def test_each_task_s_bake_passes_on_the_newest_allowed_releases(tmp_path):
    projects = {name: bake_into(tmp_path / name, **answers) for name, answers in NEWEST.items()}
    assert {answers.get("task", "text-classification") for answers in NEWEST.values()} == {"text-classification", "causal-lm"}
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    python = tmp_path / "venv" / "bin" / "python"
    for project in projects.values():
        pip("install", "--quiet", "-e", ".[xla-cpu,dev]", cwd=project, python=str(python))  # the README's, without -c
    frozen = pip("freeze", python=str(python))
    versions = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
                for line in frozen.splitlines() if "==" in line}
    assert all(versions.get(name) for name in WATCHED if name != "kernels"), versions
    if os.environ.get("NEWEST_VERSIONS"):
        Path(os.environ["NEWEST_VERSIONS"]).write_text(
            "".join(f"{name}=={versions.get(name)}\n" for name in WATCHED) + "\n" + frozen
        )
    for name, project in projects.items():
        run_baked_tests(project, "tests", "-m", "not slow or pretrained", name=f"newest-{name}", python=str(python))
