"""The pins agree: torch_xla is bound to exactly one torch release."""

import re

from tests.baking import TEMPLATE, template_defaults


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
    assert f'"torch_xla[tpu]=={version}"' in text
