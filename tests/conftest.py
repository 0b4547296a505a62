"""Fixtures that bake the template into temporary folders, and the order the suite runs in."""

from pathlib import Path

import pytest

from tests.baking import bake_into

MARKERS = (
    "slow(first=None): runs baked projects' training tests or benchmarks (minutes); first=N: the longest, N-th",
    "check_only: what `make check` runs and `make test` runs inside a longer test instead",
    "alone: times runs against each other; `make test` runs these after the rest, with nothing beside them",
    "compares(form, what): checks two runs' numbers, bit for bit or within a bound (the bake's tests/comparing.py)",
)


def pytest_configure(config):
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


def run_order(item) -> tuple[bool, bool, int]:
    """(not slow, not one of the longest, rank): the longest are the slow ones marked first (`slow(first=rank)`, rank
    0 first), and the fast tiers that only `make check` runs (the longest of its tests)."""
    slow = item.get_closest_marker("slow")
    first = slow.kwargs.get("first") if slow else None
    longest = first is not None or item.get_closest_marker("check_only") is not None
    return slow is None and not longest, not longest, first or 0


def pytest_collection_modifyitems(items):
    """The longest tests first, then the other slow ones: the two workers of `make test` (pytest-xdist, one test at a
    time to whichever is free) start the longest runs at once and the short tests fill the gaps at the end, instead of
    one worker finishing a long suite alone. The sort is stable: collection order otherwise."""
    items.sort(key=run_order)


@pytest.fixture
def bake(tmp_path):
    """Bake with the given answers (defaults otherwise); return the project folder."""

    def _bake(**answers) -> Path:
        return bake_into(tmp_path / "baked", **answers)

    return _bake


@pytest.fixture(scope="session")
def bake_once(tmp_path_factory):
    """Bake each answer set once per session (per xdist worker) and share the folder, for tests that only read a bake:
    test_bake's seven checks of every combination and test_task_only's imports read the same bakes (a bake is 1-2 s;
    baking each set for each test was about a hundred bakes)."""
    made = {}

    def _bake(**answers) -> Path:
        key = tuple(sorted(answers.items()))
        if key not in made:
            made[key] = bake_into(tmp_path_factory.mktemp("bake-once"), **answers)
        return made[key]

    return _bake


@pytest.fixture(scope="session")
def default_project(tmp_path_factory) -> Path:
    return bake_into(tmp_path_factory.mktemp("default"))
