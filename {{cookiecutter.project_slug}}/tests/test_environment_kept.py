"""A test's in-process code cannot leave variables behind for the runs of later tests (conftest.environment_as_it_was).

Until it did, the TPU compiler test_plan.py calls in this process set libtpu's variables for good, and every later run
of the suite differed from the fork server's environment: a plain subprocess, 5-9 s of imports each instead of a fork.
"""

import importlib.util
import os

import pytest
from conftest import RUNTIME_VARIABLES, child_env, fork_server, restore_environment


def test_what_a_test_set_is_gone_and_what_it_changed_is_back():
    before = dict(os.environ)
    os.environ["TPU_WORKER_HOSTNAMES"] = "localhost"  # what xla/tpu_compile.py sets for a deviceless compile
    os.environ["HOME"] = "/elsewhere"
    restore_environment(before)
    assert dict(os.environ) == before and "TPU_WORKER_HOSTNAMES" not in os.environ


def test_a_variable_this_test_leaves_set():
    """Set here and left set: the autouse fixture takes it away before the next test (the one below)."""
    os.environ["LEFT_BY_A_TEST"] = "1"


def test_the_variable_the_test_before_left_is_gone():
    assert "LEFT_BY_A_TEST" not in os.environ


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="the plan extra (libtpu) is not installed")
def test_runs_after_an_in_process_tpu_compile_fork():
    """What test_plan.py does in this process (libtpu lays out a slice), then what the runs of the next tests meet."""
    from {{ cookiecutter.project_slug }}.xla.tpu_compile import topology_devices

    server = fork_server()  # started already in a whole suite, or now
    before = dict(os.environ)
    assert len(topology_devices("v5e:2x2", (2, 2, 1))) == 4
    leaked = child_env()
    restore_environment(before)  # what environment_as_it_was does at the test's end
    assert not server.routable(leaked, RUNTIME_VARIABLES)  # what every later run met: a plain subprocess
    assert server.routable(child_env(), RUNTIME_VARIABLES)
