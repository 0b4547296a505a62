"""A bake installed as its README says but without constraints.txt: pip takes the newest releases that the baked
pyproject.toml's ranges allow on the day, which the pinned environment (requirements.txt) does not run. Each task's
bake runs its fast tier and the tests that fine-tune a model saved with save_pretrained (marked `pretrained`) there,
as the baked project's own scheduled CI job `newest` does. A range that admits a release the project cannot run fails
here first.

The two bakes are also two of the answer sets whose fast tier tests/test_generated_project.py would run otherwise
(one per task: the script alone in float32, the notebook alone at XLA_USE_BF16), so this environment costs the suite
its install and the pretrained runs only. Both are installed into one new environment (the second install adds its
own package): one environment instead of two. NEWEST_VERSIONS (make test sets it) names a file for what
`pip freeze` gave.

torch is the one package whose newest allowed release is known before pip runs: the bake pins it exactly (the release
torch_xla is built against), and torch pins the CUDA libraries and triton it brings exactly. Those 6.7 GB are linked
from this environment (link_pinned_torch) instead of unpacked again (80 s of a 2-core machine's suite, measured); pip
finds them installed, as it would have installed them, and resolves everything else on its own.
"""

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from tests.baking import bake_into, pip, run_baked_tests

NEWEST = {
    "script-float32-no-benchmarks": {"variants": "script", "mixed_precision": "no", "include_benchmarks": False},
    "causal-lm-xla-notebook-no-benchmarks": {"task": "causal-lm", "pure_bf16": "xla", "variants": "notebook",
                                             "include_benchmarks": False},
}
# What the report names; the template's pins say what the pinned environment has.
WATCHED = ("torch", "torch-xla", "accelerate", "transformers", "datasets", "tokenizers", "peft", "kernels")


def link_pinned_torch(projects, venv: Path, folder: Path) -> list[str]:
    """Make this environment's torch, and the releases it pins exactly, importable in `venv` (a .pth file naming
    `folder`, which holds links to them) where every bake pins torch at this release; returns the packages linked.

    pip reads installed packages from every folder on the interpreter's path, so it takes these as installed."""
    torch = importlib.metadata.distribution("torch")
    for project in projects:
        pinned = tomllib.loads((project / "pyproject.toml").read_text())["project"]["dependencies"]
        if f"torch=={torch.version}" not in pinned:
            return []  # a bake that lets pip choose torch gets the torch pip chooses
    names = ["torch"] + [requirement.name for requirement in map(Requirement, torch.requires or [])
                         if (not requirement.marker or requirement.marker.evaluate({"extra": ""}))
                         and any(spec.operator == "==" for spec in requirement.specifier)]
    folder.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for top in sorted({file.parts[0] for name in names for file in importlib.metadata.distribution(name).files
                       if file.parts[0] != ".."}):  # the scripts in bin/ (torchrun) are not needed here
        (folder / top).symlink_to(site / top)
    (venv_site,) = (venv / "lib").glob("python*/site-packages")
    (venv_site / "pinned-torch.pth").write_text(f"{folder}\n")
    return names


@pytest.mark.slow(first=6)
def test_each_task_s_bake_passes_on_the_newest_allowed_releases(tmp_path):
    projects = {name: bake_into(tmp_path / name, **answers) for name, answers in NEWEST.items()}
    assert {answers.get("task", "text-classification") for answers in NEWEST.values()} == {"text-classification", "causal-lm"}
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    python = tmp_path / "venv" / "bin" / "python"
    linked = link_pinned_torch(projects.values(), tmp_path / "venv", tmp_path / "pinned-torch")
    for project in projects.values():
        pip("install", "--quiet", "-e", ".[xla-cpu,dev]", cwd=project, python=str(python))  # the README's, without -c
    frozen = pip("freeze", python=str(python))
    versions = {line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
                for line in frozen.splitlines() if "==" in line}
    assert all(versions.get(name) for name in WATCHED if name != "kernels"), versions
    # What was linked is what pip reports, at this environment's releases.
    assert {name: versions.get(name) for name in linked} == {
        name: importlib.metadata.version(name) for name in linked}, versions
    if os.environ.get("NEWEST_VERSIONS"):
        Path(os.environ["NEWEST_VERSIONS"]).write_text(
            "".join(f"{name}=={versions.get(name)}\n" for name in WATCHED) + "\n" + frozen
        )
    for name, project in projects.items():
        run_baked_tests(project, "tests", "-m", "not slow or pretrained", name=f"newest-{name}", python=str(python))
