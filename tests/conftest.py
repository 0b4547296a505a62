"""Bake the template through cookiecutter's own API into temporary folders."""

import json
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
