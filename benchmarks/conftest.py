"""Bake the template with its defaults once for the benchmark run, and print what it measured."""

from pathlib import Path

import pytest

from tests.baking import TEMPLATE, bake_into, template_defaults

RESULTS = TEMPLATE / "benchmark-results"
SUMMARY = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def baked_default(tmp_path_factory) -> Path:
    assert template_defaults()["include_benchmarks"], "the default answers must keep the benchmark suite"
    return bake_into(tmp_path_factory.mktemp("bench-bake"))


@pytest.fixture
def summary(pytestconfig) -> list:
    """Lines printed after the run (pytest captures a test's own output)."""
    return pytestconfig.stash.setdefault(SUMMARY, [])


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("reference benchmarks (baked default project, quick profile)")
        for line in lines:
            terminalreporter.write_line(line)
