"""Fixtures that bake the template into temporary folders."""

from pathlib import Path

import pytest

from tests.baking import bake_into


@pytest.fixture
def bake(tmp_path):
    """Bake with the given answers (defaults otherwise); return the project folder."""

    def _bake(**answers) -> Path:
        return bake_into(tmp_path / "baked", **answers)

    return _bake


@pytest.fixture(scope="session")
def default_project(tmp_path_factory) -> Path:
    return bake_into(tmp_path_factory.mktemp("default"))
