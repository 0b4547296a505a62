"""One run per output folder (fault_tolerance/run_lock.py): a second run into a folder that a live run uses stops at
start, in every process, before it writes anything; a lock whose run is gone is taken over with a line that says so.

The live "other run" is a lock naming a process that runs (this test's own, or its parent) rather than a second
training: the same file, without minutes of training beside the test. A lock left by a SIGKILLed run is taken over in
test_resume.py, which kills real runs.
"""

import json
import os
import subprocess
import sys
import time

import psutil
import pytest
from conftest import PROJECT, QUICK, python_command, run, train_in_workers

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.fault_tolerance import run_lock
from {{ cookiecutter.project_slug }}.fault_tolerance.run_lock import LOCK_FILE, FolderInUse, RunLock
from {{ cookiecutter.project_slug }}.launch.hosts import host_name

pytestmark = pytest.mark.machinery

def write_lock(folder, pid, host=None, process_started=None, refreshed=None):
    """A lock as a run writes it, naming `pid` (its real start time unless given) on `host` (this one unless given)."""
    folder.mkdir(parents=True, exist_ok=True)
    if process_started is None:
        process_started = psutil.Process(pid).create_time() if host is None else time.time() - 60
    lock = {"host": host or host_name(), "pid": pid, "process_started": round(process_started, 2), "started": time.time(),
            "refreshed": time.time() if refreshed is None else refreshed}
    (folder / LOCK_FILE).write_text(json.dumps(lock))
    return lock


def held_by(folder) -> dict:
    return json.loads((folder / LOCK_FILE).read_text())


def refusal(folder, pid, host=None) -> str:
    return f"output_dir={str(folder)!r} is in use by another run: process {pid} on host {host or host_name()}, started "


def files(folder) -> dict:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


# ---- the lock's logic, in this process ------------------------------------------------------------------


def test_a_free_folder_is_taken_and_released(tmp_path):
    with RunLock(tmp_path) as lock:
        lock.take()
        held = held_by(tmp_path)
        assert (held["host"], held["pid"]) == (host_name(), os.getpid())
        assert held["process_started"] == round(psutil.Process().create_time(), 2)
        assert held["started"] <= held["refreshed"] <= time.time()
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_live_process_of_another_run_is_refused_whatever_process_asks(tmp_path):
    other = os.getppid()  # alive, on this host, and not a worker beside this process
    write_lock(tmp_path, other)
    lock = RunLock(tmp_path)
    for attempt in (lambda: lock.check(hosts_may_share=False), lock.take):
        with pytest.raises(FolderInUse) as refused:
            attempt()
        assert str(refused.value).startswith(refusal(tmp_path, other))
        assert "--overwrite_output_dir does not stop a running run" in str(refused.value)
    lock.release()
    assert held_by(tmp_path)["pid"] == other  # not this run's to remove


def test_a_lock_whose_process_is_gone_is_taken_over_with_a_line(tmp_path, capsys):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    write_lock(tmp_path, ended.pid, process_started=time.time() - 5)
    with RunLock(tmp_path) as lock:
        lock.check(hosts_may_share=False)
        lock.take()
        assert held_by(tmp_path)["pid"] == os.getpid()
    assert (f"taking over the lock of process {ended.pid} on host {host_name()}: that process is no longer running"
            in capsys.readouterr().out)


def test_a_process_id_given_to_another_program_is_taken_over(tmp_path, capsys):
    reused = os.getppid()
    write_lock(tmp_path, reused, process_started=psutil.Process(reused).create_time() - 100)
    with RunLock(tmp_path) as lock:
        lock.take()
        assert held_by(tmp_path)["pid"] == os.getpid()
    assert f"process {reused} on host {host_name()}: that process id now belongs to another program" in capsys.readouterr().out


def test_another_hosts_lock_is_refused_until_stale_then_taken_over(tmp_path, capsys):
    write_lock(tmp_path, 4242, host="another-host")
    lock = RunLock(tmp_path)
    with pytest.raises(FolderInUse) as refused:
        lock.check(hosts_may_share=False)
    assert str(refused.value).startswith(refusal(tmp_path, 4242, "another-host"))
    assert "one on another host once not refreshed for 10 min (a run refreshes it every 60 s)" in str(refused.value)
    lock.check(hosts_may_share=True)  # on a pod it may be this run's own first host
    write_lock(tmp_path, 4242, host="another-host", refreshed=time.time() - run_lock.STALE_SECONDS - 60)
    with lock:
        lock.check(hosts_may_share=False)
        lock.take()
        assert held_by(tmp_path)["pid"] == os.getpid()
    said = capsys.readouterr().out
    assert "taking over the lock of process 4242 on host another-host: not refreshed for 11 min" in said
    assert "(a run refreshes it every 60 s; after 10 min it is taken as stopped)" in said


def test_a_lock_held_by_this_very_process_is_its_own(tmp_path, capsys):
    """A notebook that runs the function again after an interrupted call finds its own lock."""
    write_lock(tmp_path, os.getpid())
    with RunLock(tmp_path) as lock:
        lock.check(hosts_may_share=False)
        lock.take()
    assert capsys.readouterr().out == ""
    assert not (tmp_path / LOCK_FILE).exists()


def test_every_process_of_a_second_run_stops_on_its_own(tmp_path, monkeypatch):
    """A worker that is not the first (RANK 1) finds the other run's lock itself: it does not wait for its first
    process at the rendezvous, which has already stopped."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    write_lock(tmp_path, os.getppid())
    with pytest.raises(FolderInUse):
        RunLock(tmp_path).check(hosts_may_share=False)


SIBLING = """
import os, sys
from {{ cookiecutter.project_slug }}.fault_tolerance.run_lock import FolderInUse, RunLock
said = []
for rank in ("1", "0"):
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = rank
    try:
        RunLock(sys.argv[1]).check(hosts_may_share=False)
        said.append(f"rank {rank}: goes on")
    except FolderInUse:
        said.append(f"rank {rank}: refused")
print("; ".join(said))
"""


def test_a_lock_held_by_a_worker_of_the_same_launch_is_the_runs_own(tmp_path):
    """The launcher's workers are siblings (children of torchrun, xmp.spawn or notebook_launcher): the lock of one is
    the run's for the others, but a first process beside it (two `python train.py &` of one shell) is another run."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        write_lock(tmp_path, holder.pid)
        found = subprocess.run([sys.executable, "-c", SIBLING, str(tmp_path)], capture_output=True, text=True,
                               cwd=PROJECT, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert found.stdout.strip() == "rank 1: goes on; rank 0: refused", found.stderr[-3000:]


def test_the_lock_is_refreshed_while_held(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "REFRESH_SECONDS", 0.02)
    with RunLock(tmp_path) as lock:
        lock.take()
        first = held_by(tmp_path)["refreshed"]
        deadline = time.monotonic() + 30
        while held_by(tmp_path)["refreshed"] == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert held_by(tmp_path)["refreshed"] > first
        assert held_by(tmp_path)["started"] < held_by(tmp_path)["refreshed"]
    assert not (tmp_path / LOCK_FILE).exists()


def test_the_notebooks_function_refuses_a_folder_in_use(tmp_path):
    """training_function, as the notebook calls it: refused before any Accelerator or device, the lock left as it was."""
    write_lock(tmp_path, os.getppid())
    before = files(tmp_path)
    with pytest.raises(FolderInUse, match="is in use by another run"):
        from {{ cookiecutter.project_slug }}.loop.training import training_function

        training_function(config=TrainConfig(output_dir=str(tmp_path), demo=True))
    assert files(tmp_path) == before


# ---- whole runs --------------------------------------------------------------------------------------


@pytest.mark.layout("data")
@pytest.mark.parametrize("extra", [[], ["--overwrite_output_dir"]], ids=["plain", "overwrite-output-dir"])
def test_a_second_run_is_refused_at_start_with_one_line(tmp_path, extra):
    """The test's own process plays the run that holds the folder: exit 2, one line, nothing written (no probe, no
    compilation cache or log, no metrics)."""
    output = tmp_path / "outputs"
    write_lock(output, os.getpid())
    before = files(output)
    result = run(python_command("--output_dir", str(output), *QUICK, "--compilation_cache", "true", *extra), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + refusal(output, os.getpid()))
    assert "Traceback" not in result.stderr
    assert files(output) == before and sorted(output.iterdir()) == [output / LOCK_FILE]


@pytest.mark.workers
@pytest.mark.layout("data")
def test_two_gloo_workers_both_stop_at_a_folder_in_use(tmp_path):
    """notebook_launcher's two forked workers: both stop at start (neither waits at the rendezvous for the other)."""
    output = tmp_path / "outputs"
    write_lock(output, os.getpid())
    _, refused, _ = train_in_workers(tmp_path, 2, *QUICK, check=False)
    assert refused.returncode != 0
    assert (refused.stdout + refused.stderr).count(refusal(output, os.getpid())) >= 1
    assert sorted(output.iterdir()) == [output / LOCK_FILE]


@pytest.mark.xla
@pytest.mark.layout("fsdp")
def test_an_fsdp_run_is_refused_at_start_and_another_hosts_fresh_lock_once_the_hosts_are_known(tmp_path):
    """fsdp: every host's process looks first until the hosts are known. A live lock on this host stops the run at
    start; a fresh one on another host may be the run's own host 0's, so host 0 (here the only host) decides."""
    output = tmp_path / "outputs"
    write_lock(output, os.getpid())
    result = run(python_command("--output_dir", str(output), *QUICK, "--parallelism", "fsdp"), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + refusal(output, os.getpid()))
    assert sorted(output.iterdir()) == [output / LOCK_FILE]
    write_lock(output, 4242, host="another-host")
    result = run(python_command("--output_dir", str(output), *QUICK, "--parallelism", "fsdp"), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + refusal(output, 4242, "another-host"))
    assert held_by(output)["pid"] == 4242
