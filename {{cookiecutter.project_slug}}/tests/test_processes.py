"""What a worker does before it meets the others: wait until the launcher has forked them all (processes.py says why).

The launcher is faked here (its children counted as they appear); the real fork and rendezvous run in the tests that
start several processes (test_multiprocess.py, test_chip_count.py, test_notebook.py), and the template's
tools/gloo_startup_stress.py repeats the start-up hundreds of times.
"""

import os

import psutil
import pytest

from {{ cookiecutter.project_slug }}.launch import processes


class Launcher:
    """A launcher process that has forked one more worker each time it is asked (up to `forks`)."""

    def __init__(self, forks: int):
        self.forks, self.asked, self.pids = forks, 0, []

    def __call__(self, pid):
        self.pids.append(pid)
        return self

    def children(self):
        self.asked += 1
        return [object()] * min(self.asked, self.forks)


@pytest.fixture
def launcher(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)

    def fake(forks: int) -> Launcher:
        faked = Launcher(forks)
        monkeypatch.setattr(psutil, "Process", faked)
        return faked

    return fake


def test_a_worker_waits_until_every_sibling_is_forked(launcher, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    parent = launcher(forks=4)
    processes.wait_for_forked_siblings(timeout=30)
    assert parent.pids == [os.getppid()]  # the launcher is the worker's parent
    assert parent.asked == 4  # asked again until all four were there, not once more


def test_a_launcher_that_never_forks_them_all_delays_the_worker_by_the_timeout_only(launcher, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    parent = launcher(forks=2)
    processes.wait_for_forked_siblings(timeout=0.2)
    assert 2 <= parent.asked < 50


@pytest.mark.parametrize("variables", [{}, {"LOCAL_WORLD_SIZE": "1"}, {"LOCAL_WORLD_SIZE": "4", "PJRT_DEVICE": "TPU"}])
def test_one_process_or_an_xla_launch_does_not_wait(launcher, monkeypatch, variables):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    parent = launcher(forks=0)
    processes.wait_for_forked_siblings(timeout=30)
    assert parent.asked == 0 and parent.pids == []
