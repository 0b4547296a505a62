"""The pins agree: torch_xla is bound to exactly one torch release, and a bake carries the pins as its constraints."""

import json
import re

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.baking import TEMPLATE, pip, template_defaults


def pinned(name: str) -> str:
    text = (TEMPLATE / "requirements.txt").read_text()
    match = re.search(rf"^{re.escape(name)}==(\S+)$", text, re.MULTILINE)
    assert match, f"{name} is not pinned with == in requirements.txt"
    return match.group(1)


def test_torch_and_torch_xla_pinned_together():
    assert pinned("torch") == pinned("torch_xla")


def test_generated_project_pins_the_same_torch():
    assert template_defaults()["_torch_version"] == pinned("torch")


def test_baked_pyproject_uses_the_pin(default_project):
    text = (default_project / "pyproject.toml").read_text()
    version = pinned("torch")
    assert f'"torch=={version}"' in text
    assert f'"torch_xla[tpu,pallas]=={version}"' in text  # pallas: torch_xla's pinned jax (--step_function jax)
    assert f'"torch_xla[pallas]=={version}"' in text


def test_libtpu_is_the_release_torch_xla_pins_for_tpus(default_project):
    """plan.py --compile's libtpu (the `plan` extra) is the one torch_xla's own `tpu` extra installs on a TPU VM: the
    compiler that checks a plan is the one the run compiles with."""
    from importlib.metadata import requires

    (wanted,) = [Requirement(line) for line in requires("torch_xla") if line.startswith("libtpu")]
    assert 'extra == "tpu"' in str(wanted.marker)
    assert str(wanted.specifier) == f"=={pinned('libtpu')}"
    plan = tomllib.loads((default_project / "pyproject.toml").read_text())["project"]["optional-dependencies"]["plan"]
    assert f"libtpu=={pinned('libtpu')}" in plan


def constraint_pins(project) -> dict[str, str]:
    """{name: version} of a baked constraints.txt's `name==version` lines."""
    lines = [line.split("#")[0].strip() for line in (project / "constraints.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if line)


def requirement_names(project) -> set[str]:
    """Every distribution the baked pyproject.toml asks for, its extras included."""
    project_table = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    wanted = project_table["dependencies"] + [req for extra in project_table["optional-dependencies"].values()
                                              for req in extra]
    return {canonicalize_name(Requirement(req).name) for req in wanted}


@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_the_bake_carries_the_template_pins_as_its_constraints(bake, task):
    """constraints.txt is requirements.txt's pins, line for line, for everything the baked project installs."""
    project = bake(task=task)
    pins = constraint_pins(project)
    for name, version in pins.items():
        assert pinned(name) == version, f"constraints.txt pins {name}=={version}, requirements.txt {pinned(name)}"
    assert requirement_names(project) <= {canonicalize_name(name) for name in pins}


@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_installing_with_the_constraints_gives_exactly_the_environment_the_suites_run_in(bake, task, tmp_path):
    """The README's install line with `-c constraints.txt`, resolved by pip (a dry run) inside the pinned environment
    that runs every baked suite: it would install the project and nothing else, so what users install with the
    constraints is what the whole suites (their fine-tuning of saved models included) ran on."""
    project = bake(task=task)
    report = tmp_path / "pip-report.json"
    pip("install", "--dry-run", "--quiet", "--report", str(report), "-e", ".[xla-cpu,dev]", "-c", "constraints.txt",
        cwd=project)
    wanted = [(item["metadata"]["name"], item["metadata"]["version"]) for item in json.loads(report.read_text())["install"]]
    assert wanted == [(project.name.replace("_", "-"), "0.1.0")]


def test_the_bake_installs_the_xpk_its_tests_were_run_with(default_project):
    """The baked docs/tests.md, CI and launch test name tools/xpk-requirements.txt's xpk, the one make test runs."""
    (pin,) = [line for line in (TEMPLATE / "tools" / "xpk-requirements.txt").read_text().splitlines()
              if line.startswith("xpk==")]
    for path in ("docs/tests.md", ".github/workflows/ci.yml"):
        assert f".venv-xpk/bin/pip install {pin}" in (default_project / path).read_text(), path
    assert f'XPK_VERSION = "{pin.removeprefix("xpk==")}"' in (default_project / "tests" / "test_launch.py").read_text()
