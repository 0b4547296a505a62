"""Several hosts sharing one output_dir (fsdp on a pod), simulated on one machine: the file protocol.

Two processes play two hosts, each an SPMD process over 2 XLA CPU devices. The shipped code asks
`hosts.this_host()` and `hosts.host_name()` which host it is; HOST below answers for each process from
outside the shipped code (as the tests hide torch_xla) and meets the other through a local TCP rendezvous
instead of torch_xla's. The two cannot all-reduce with each other, so each trains alone on its share of
the data: what is proven is who writes and reads which file, not the training of a real pod.

An audit hook records every file a host opens, renames or removes under output_dir; torch.save and
safetensors write from C++, where the hook does not see them, so they are wrapped too.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, child_env, free_port, python_code

from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST, PROGRESS
from {{ cookiecutter.project_slug }}.parallel.fsdp_checkpoint import HOST_STATE

pytestmark = [pytest.mark.xla, pytest.mark.layout("fsdp"), pytest.mark.machinery, pytest.mark.slow]

HOST = """
import atexit, json, os, sys
from pathlib import Path
index, count, rendezvous, name, shared, record, *argv = sys.argv[1:]
shared, events, recording = os.path.realpath(shared), [], [True]

def note(kind, path):
    if recording[0] and isinstance(path, (str, bytes, os.PathLike)):
        path = os.path.realpath(os.fsdecode(path))
        if path.startswith(shared + os.sep):
            events.append((kind, os.path.relpath(path, shared)))

def audit(event, args):
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & (os.O_WRONLY | os.O_RDWR))
        note("write" if writes else "read", path)
    elif event == "os.rename":
        note("write", args[1])
    elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
        note("remove", args[0])

sys.addaudithook(audit)
import safetensors.torch, torch
for module, function in ((torch, "save"), (safetensors.torch, "save_file")):
    def wrapped(obj, where, *a, _original=getattr(module, function), **k):
        note("write", where)
        return _original(obj, where, *a, **k)
    setattr(module, function, wrapped)

from {{ cookiecutter.project_slug }}.fault_tolerance import resume
from {{ cookiecutter.project_slug }}.launch import hosts
from {{ cookiecutter.project_slug }}.loop import training
hosts.this_host = lambda: hosts.Host(int(index), int(count), rendezvous)
hosts.host_name = lambda: name
if os.environ.get("TEST_HOST_SEES_NO_CHECKPOINT") == index:
    resume.candidates = lambda output_dir, say: []  # this host alone would start from scratch
original = training.training_function

def recorded(*a, **k):
    report = original(*a, **k)
    Path(record, "report.json").write_text(json.dumps(report, default=str))
    return report

def save_events():
    recording[0] = False
    Path(record, "events.json").write_text(json.dumps(events))

training.training_function = recorded
atexit.register(save_events)
from {{ cookiecutter.project_slug }}.cli import main
main(argv)
"""
NAMES = ("host-a", "host-b")
# With the compilation cache (off by default), which each host writes into a folder of its own.
QUICK_FSDP = ["--parallelism", "fsdp", "--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64",
              "--train_batch_size", "4", "--max_recompilations", "0", "--compilation_cache", "true"]


def run_hosts(folder: Path, *args, output_dirs=None, env_extra=None):
    """Both hosts side by side, each over 2 XLA CPU devices; returns [(returncode, stdout, stderr, events, report)]."""
    rendezvous = f"tcp://127.0.0.1:{free_port()}"
    shared = folder / "shared"
    started = []
    for index, name in enumerate(NAMES):
        record = folder / f"record-{name}"
        record.mkdir(parents=True, exist_ok=True)
        output = (output_dirs or {}).get(index, shared)
        command = python_code(HOST, str(index), str(len(NAMES)), rendezvous, name, str(output), str(record),
                              "--output_dir", str(output), *QUICK_FSDP, *args)
        env = child_env(CPU_NUM_DEVICES="2", **(env_extra or {}))
        started.append((record, subprocess.Popen(command, cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True)))
    results = []
    for record, process in started:
        stdout, stderr = process.communicate(timeout=900)
        events = json.loads((record / "events.json").read_text()) if (record / "events.json").exists() else None
        report = json.loads((record / "report.json").read_text()) if (record / "report.json").exists() else None
        results.append((process.returncode, stdout, stderr, events, report))
    return results


def written(events) -> set[str]:
    return {path for kind, path in events if kind == "write"}


def read(events) -> set[str]:
    return {path for kind, path in events if kind == "read"}


def is_own(path: str, name: str) -> bool:
    """A file that belongs to one host: its compilation cache and compile log, or its output_dir write probe."""
    return (path.startswith(f"xla-cache/{name}-process-0/") or path == f"xla-compilations/compilations-{name}-process-0.log"
            or path.startswith(".write-test-"))


def is_shard(path: str) -> bool:
    return path.endswith(".distcp")


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    """Two epochs on two hosts, then --resume to a third epoch with host 1 finding no checkpoint on its own."""
    folder = tmp_path_factory.mktemp("two-hosts")
    first = run_hosts(folder, "--num_epochs", "2")
    for returncode, stdout, stderr, *_ in first:
        assert returncode == 0, stdout[-2000:] + stderr[-4000:]
    events = [list(result[3]) for result in first]
    resumed = run_hosts(folder, "--num_epochs", "3", "--resume", "true", env_extra={"TEST_HOST_SEES_NO_CHECKPOINT": "1"})
    for returncode, stdout, stderr, *_ in resumed:
        assert returncode == 0, stdout[-2000:] + stderr[-4000:]
    return folder / "shared", first, events, resumed


def test_only_host_0_writes_the_shared_files_and_each_host_its_own_shards(two_hosts):
    shared, first, (events_0, events_1), _ = two_hosts
    # Both hosts trained with the JAX step, the default (torchax loaded on both: the hosts' barriers still meet).
    assert json.loads((shared / "report.json").read_text())["step_function"] == "jax"
    shared_files = ("report.json", f"checkpoints/{LATEST}", f"checkpoints/.epoch-2.partial/{PROGRESS}",
                    f"checkpoints/.epoch-2.partial/{HOST_STATE}", "model/config.json", "model/model.safetensors")
    for path in shared_files:
        assert path in written(events_0), (path, sorted(written(events_0)))
    # The run's lock on output_dir (run_lock.py): host 0 takes it for both hosts and removes it at the end.
    assert ".run-lock.json" in written(events_0) and not (shared / ".run-lock.json").exists()
    # Host 1 writes nothing the job shares: only its own cache, its compile log, and its own checkpoint shards.
    stray = sorted(path for path in written(events_1) if not is_own(path, "host-b") and not is_shard(path))
    assert stray == [], stray
    assert all(is_own(path, "host-b") for kind, path in events_1 if kind == "remove")  # no pruning, no clean-up
    # Each host's compilation cache (written by torch_xla's C++, unseen by the hook) in a folder named by host.
    caches = {path.name: len(list(path.iterdir())) for path in (shared / "xla-cache").iterdir()}
    assert sorted(caches) == ["host-a-process-0", "host-b-process-0"] and all(caches.values()), caches
    # Each host wrote shards of every checkpoint and of the export, into files of its own.
    for events in (events_0, events_1):
        for place in ("checkpoints/.epoch-1.partial/sharded/", "checkpoints/.epoch-2.partial/sharded/", ".export-shards/"):
            assert any(is_shard(path) and path.startswith(place) for path in written(events)), (place, sorted(written(events)))
    assert not {path for path in written(events_0) if is_shard(path)} & {path for path in written(events_1) if is_shard(path)}
    # The manifest's hashing is shared: each host read (hashed) its own part of the staged files, the two parts the
    # manifest's files, each once (fault_tolerance/manifest.py).
    staged = "checkpoints/.epoch-2.partial/"
    parts = [{path.removeprefix(staged) for path in read(events) if path.startswith(staged)} for events in (events_0, events_1)]
    manifest_files = json.loads((shared / "checkpoints" / "epoch-2" / "manifest.json").read_text())["files"]
    assert all(parts) and not parts[0] & parts[1] and parts[0] | parts[1] == set(manifest_files), parts
    # Written once: the report and the export exist; the export's scratch shards are gone.
    assert json.loads((shared / "report.json").read_text())["layout"]["mesh"] == {"fsdp": 2}
    assert (shared / "model" / "config.json").is_file() and not (shared / ".export-shards").exists()
    # Host 0 prints the run and its report; host 1 shows neither (gloo's own connection line aside).
    assert "epoch 2/2: train loss" in first[0][1] and "xla_compilations" in first[0][1]
    assert "epoch" not in first[1][1] + first[1][2] and "xla_compilations" not in first[1][1]


def test_the_hosts_resume_from_the_checkpoint_host_0_chose(two_hosts):
    shared, _, _, resumed = two_hosts
    (_, _, _, events_0, report_0), (_, _, _, events_1, report_1) = resumed
    # Host 1's own view finds no checkpoint (TEST_HOST_SEES_NO_CHECKPOINT): it resumes from host 0's choice.
    for events in (events_0, events_1):
        assert any(path.startswith("checkpoints/epoch-2/sharded/") and is_shard(path) for path in read(events))
        assert f"checkpoints/epoch-2/{HOST_STATE}" in read(events)
    assert report_0["epochs_run"] == report_1["epochs_run"] == 1
    assert report_0["checkpoint"] == report_1["checkpoint"] == str(shared / "checkpoints" / "epoch-3")
    assert (shared / "checkpoints" / LATEST).read_text().strip() == "epoch-3"


def test_a_host_that_cannot_see_the_checkpoint_stops_both(two_hosts, tmp_path):
    shared = two_hosts[0]
    own_disk = tmp_path / "host-b-disk"
    results = run_hosts(tmp_path, "--num_epochs", "4", "--resume", "true", output_dirs={0: shared, 1: own_disk})
    assert [result[0] for result in results] == [2, 2]
    message = (f"error: resume: the checkpoint {shared / 'checkpoints' / 'epoch-3'} is not visible on host host-b "
               "(process 1): put output_dir on storage that every host sees")
    assert message in results[0][2], results[0][2][-3000:]
    assert "error:" not in results[1][2], results[1][2][-3000:]  # said once, by host 0


EXPORT = """
import sys, torch
from {{ cookiecutter.project_slug }}.parallel.fsdp import FsdpV2
from {{ cookiecutter.project_slug }}.cli import main
original = FsdpV2.host_state_dict

def both(self, accelerator, scratch):
    # What the export did before it was read from shards: every sharded parameter gathered with .cpu().
    gathered = {name.replace("_orig_module.", ""): t.detach().cpu() for name, t in self.model.state_dict().items()}
    weights = original(self, accelerator, scratch)
    torch.save({"gathered": gathered, "from_shards": weights}, sys.argv[1])
    return weights

FsdpV2.host_state_dict = both
main(sys.argv[2:])
"""


@pytest.mark.compares("bit for bit", "exported weights read from the shards against the same weights gathered on 4 "
                      "SPMD devices (no arithmetic)")
def test_the_export_read_from_shards_is_bit_identical_to_a_gather_on_4_devices(tmp_path):
    import torch
    from conftest import run
    from safetensors.torch import load_file

    compared = tmp_path / "compared.pt"
    output = tmp_path / "outputs"
    run(python_code(EXPORT, str(compared), "--output_dir", str(output), *QUICK_FSDP, "--num_epochs", "1",
                    "--checkpoint", "false"), env=child_env(CPU_NUM_DEVICES="4"))
    both = torch.load(compared)
    gathered, from_shards = both["gathered"], both["from_shards"]
    assert sorted(gathered) == sorted(from_shards)
    for name, tensor in gathered.items():
        assert from_shards[name].dtype == tensor.dtype and torch.equal(from_shards[name], tensor), name
    exported = load_file(output / "model" / "model.safetensors")
    assert exported and all(torch.equal(tensor, gathered[name]) for name, tensor in exported.items())
    assert json.loads((output / "report.json").read_text())["layout"]["mesh"] == {"fsdp": 4}


def test_the_cache_and_compile_log_are_named_by_host_and_process(tmp_path):
    from {{ cookiecutter.project_slug }}.launch import hosts

    assert hosts.process_label() == f"{hosts.host_name()}-process-0"
    env = {**os.environ, "PJRT_LOCAL_PROCESS_RANK": "3"}
    label = subprocess.run([sys.executable, "-c", "from {{ cookiecutter.project_slug }}.launch import hosts; print(hosts.process_label())"],
                           cwd=PROJECT, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert label == f"{hosts.host_name()}-process-3"
