"""Bake the template with its defaults once for the benchmark run, and print what it measured."""

from pathlib import Path

import pytest

from tests.baking import TEMPLATE, bake_into, template_defaults
from tests.conftest import pytest_configure  # noqa: F401  (the `slow` marker, also when benchmarks/ runs alone)

RESULTS = TEMPLATE / "benchmark-results"
SUMMARY = "benchmark summary"


@pytest.fixture(scope="session")
def baked_default(tmp_path_factory) -> Path:
    assert template_defaults()["include_benchmarks"], "the default answers must keep the benchmark suite"
    return bake_into(tmp_path_factory.mktemp("bench-bake"))


@pytest.fixture
def summary(record_property) -> list:
    """Lines printed after the run. pytest captures a test's own output, and under pytest-xdist a test runs in a
    worker: the lines travel to the printing process as a property of the test's report."""
    lines = []
    record_property(SUMMARY, lines)  # the report made after the test's call reads the list as the test left it
    return lines


def pytest_terminal_summary(terminalreporter, config):
    lines = [line for report in terminalreporter.stats.get("passed", [])
             for name, value in getattr(report, "user_properties", []) if name == SUMMARY for line in value]
    if lines:
        terminalreporter.section("reference benchmarks (baked default project, quick profile)")
        for line in lines:
            terminalreporter.write_line(line)
