"""Loading runs no code: every pickled file a run reads back holding more than tensors and plain data is refused.

Each kind of file is crafted so that unpickling it would create a marker file: the project's loading must refuse it
in one line that names the file, and the marker must not exist afterwards. Most of it runs in this process on a
small checkpoint written once per module (the load refuses before any device is touched), the shards' pickled entries
(read by torch_xla's planner) in a fresh process; one run per layout goes through the command line, --resume on a
trained checkpoint with one crafted file: exit status 2, one line, no traceback.
"""

import pickle
import random
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import CHECKPOINTED_RUN, checkpointed_env, child_env, python_code, python_command, run

from {{ cookiecutter.project_slug }}.fault_tolerance import manifest
from {{ cookiecutter.project_slug }}.fault_tolerance.safe_loading import DCP_METADATA_CLASSES, UnsafeCheckpoint, check_dcp_metadata
from {{ cookiecutter.project_slug }}.parallel import fsdp_checkpoint
from {{ cookiecutter.project_slug }}.parallel.data import DataParallel

REFUSED = "holds more than tensors and plain data"
DATA_FILES = ("pytorch_model.bin", "optimizer.bin", "scheduler.bin", "random_states_0.pkl")


class Payload:
    """Unpickled, runs code: it creates `marker`."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def crafted(honest, marker: Path):
    """An honest object of the file's kind with the payload inside it, where its unpickling would reach it."""
    if isinstance(honest, dict):
        return {**honest, "extra": [Payload(marker)]}
    honest.planner_data = Payload(marker)  # torch.distributed.checkpoint's Metadata
    return honest


def craft(path: Path, marker: Path) -> None:
    """Rewrite `path` in its own format (DCP's .metadata: a plain pickle; the others: torch.save) with the payload."""
    if path.name == ".metadata":
        with path.open("rb") as handle:
            honest = pickle.load(handle)  # written by these tests or their own runs: trusted
        path.write_bytes(pickle.dumps(crafted(honest, marker)))
    else:
        torch.save(crafted(torch.load(path, weights_only=False), marker), path)


def assert_refused(raised, path: Path, marker: Path) -> None:
    message = str(raised.value)
    assert message.startswith(f"{path} {REFUSED}") and "\n" not in message, message
    assert "(it names exec)" in message, message
    assert not marker.exists(), "the crafted file ran"


@pytest.fixture(autouse=True)
def random_states_kept():
    """The loads below set this process's random states: put them back."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


def tiny_training_state():
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return model, optimizer, scheduler


@pytest.fixture(scope="module")
def data_checkpoint(tmp_path_factory) -> Path:
    """The files of Accelerate's save_state as it writes them (the random states without the XLA seed: loading
    one would start torch_xla's runtime in this process; Accelerate skips the random states without it)."""
    folder = tmp_path_factory.mktemp("data-checkpoint")
    model, optimizer, scheduler = tiny_training_state()
    for name, state in zip(DATA_FILES, (model.state_dict(), optimizer.state_dict(), scheduler.state_dict(), {
        "step": 0, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
        "torch_manual_seed": torch.get_rng_state(),
    }), strict=True):
        torch.save(state, folder / name)
    return folder


class Resuming:
    """What DataParallel.load_state asks of the Accelerator, with Accelerate's own loading of the files."""

    process_index = 0

    def load_state(self, folder, **kwargs):
        from accelerate.checkpointing import load_accelerator_state

        model, optimizer, scheduler = tiny_training_state()
        load_accelerator_state(folder, [model], [optimizer], [scheduler], [], 0, **kwargs)


@pytest.fixture
def resuming(monkeypatch) -> Resuming:
    """Accelerate's logger wants an Accelerator's state, whose creation here would start torch_xla's runtime in this
    process: a plain logger instead."""
    import logging

    import accelerate.checkpointing

    monkeypatch.setattr(accelerate.checkpointing, "logger", logging.getLogger("accelerate.checkpointing"))
    return Resuming()


def copy_of(checkpoint: Path, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(checkpoint, tmp_path / "checkpoint"))


@pytest.mark.layout("data")
@pytest.mark.machinery
def test_an_honest_data_checkpoint_loads(data_checkpoint, tmp_path, resuming):
    DataParallel(SimpleNamespace(), SimpleNamespace(lora_r=None)).load_state(resuming, copy_of(data_checkpoint, tmp_path))


@pytest.mark.layout("data")
@pytest.mark.machinery
@pytest.mark.parametrize("name", DATA_FILES)
def test_a_crafted_data_checkpoint_file_is_refused_by_name(data_checkpoint, tmp_path, resuming, name):
    folder, marker = copy_of(data_checkpoint, tmp_path), tmp_path / "ran"
    craft(folder / name, marker)
    with pytest.raises(UnsafeCheckpoint) as raised:
        DataParallel(SimpleNamespace(), SimpleNamespace(lora_r=None)).load_state(resuming, folder)
    assert_refused(raised, folder / name, marker)


@pytest.fixture(scope="module")
def fsdp_checkpoint_folder(tmp_path_factory) -> Path:
    """A checkpoint of save_sharded's files: torch.distributed.checkpoint's shards of CPU tensors, and host_state."""
    import torch.distributed.checkpoint as dcp

    folder = tmp_path_factory.mktemp("fsdp-checkpoint")
    model, optimizer, scheduler = tiny_training_state()
    state = {"model": {**model.state_dict(), "half": torch.ones(3, dtype=torch.bfloat16)},
             "optimizer": optimizer.state_dict()}
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder / fsdp_checkpoint.SHARDED)), no_dist=True)
    torch.save(fsdp_checkpoint.host_state(scheduler, 7), folder / fsdp_checkpoint.HOST_STATE)
    return folder


@pytest.mark.layout("fsdp")
@pytest.mark.machinery
def test_the_host_state_is_tensors_and_plain_data_and_gives_numpy_its_state_back(fsdp_checkpoint_folder):
    from {{ cookiecutter.project_slug }}.fault_tolerance.safe_loading import load_plain

    np.random.seed(3)
    saved = fsdp_checkpoint.host_state(torch.optim.lr_scheduler.LambdaLR(tiny_training_state()[1], lambda s: 1.0), 7)
    expected = np.random.random(5)
    path = fsdp_checkpoint_folder.parent / "host_state_round_trip.pt"
    torch.save(saved, path)
    fsdp_checkpoint._set_numpy_state(load_plain(path)["numpy"])  # weights-only, no allow-list
    assert np.array_equal(np.random.random(5), expected)


@pytest.mark.layout("fsdp")
@pytest.mark.machinery
def test_an_honest_sharded_folder_passes_the_metadata_check_and_is_read(fsdp_checkpoint_folder):
    weights = fsdp_checkpoint.read_weights_sharded(fsdp_checkpoint_folder / fsdp_checkpoint.SHARDED)
    assert torch.equal(weights["model.half"], torch.ones(3, dtype=torch.bfloat16))


@pytest.mark.layout("fsdp")
@pytest.mark.machinery
@pytest.mark.parametrize("name", [f"{fsdp_checkpoint.SHARDED}/.metadata", fsdp_checkpoint.HOST_STATE])
def test_a_crafted_fsdp_checkpoint_file_is_refused_by_name(fsdp_checkpoint_folder, tmp_path, name):
    folder, marker = copy_of(fsdp_checkpoint_folder, tmp_path), tmp_path / "ran"
    craft(folder / name, marker)
    with pytest.raises(UnsafeCheckpoint) as raised:  # refused before the model or the optimizer are touched
        fsdp_checkpoint.load_sharded(None, None, None, folder)
    assert_refused(raised, folder / name, marker)
    if name.endswith(".metadata"):  # the export reads the same kind of folder
        with pytest.raises(UnsafeCheckpoint) as raised:
            fsdp_checkpoint.read_weights_sharded(folder / fsdp_checkpoint.SHARDED)
        assert_refused(raised, folder / name, marker)


# The pickled (non-tensor) entries of the shards, which torch_xla's load planner reads with torch.load's default
# (weights-only): a fresh process, since the planner is torch_xla's.
CRAFTED_ENTRY = """
import sys, torch, torch.distributed.checkpoint as dcp
from pathlib import Path
from {{ cookiecutter.project_slug }}.fault_tolerance.safe_loading import UnsafeCheckpoint
from {{ cookiecutter.project_slug }}.parallel import fsdp_checkpoint

folder, marker = Path(sys.argv[1]), sys.argv[2]

class Payload:
    def __reduce__(self):
        return exec, (f"open({marker!r}, 'w').close()",)

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters())
model(torch.ones(1, 4)).sum().backward()
optimizer.step()
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
state = fsdp_checkpoint._state(model, optimizer)
state["optimizer"]["param_groups"] = [Payload()]
dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder / fsdp_checkpoint.SHARDED)), no_dist=True)
torch.save(fsdp_checkpoint.host_state(scheduler, 7), folder / fsdp_checkpoint.HOST_STATE)
try:
    fsdp_checkpoint.load_sharded(model, optimizer, scheduler, folder)
except UnsafeCheckpoint as problem:
    print(problem)
"""


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.machinery
def test_a_crafted_entry_of_the_shards_is_refused_naming_their_folder(tmp_path):
    marker = tmp_path / "ran"
    result = run(python_code(CRAFTED_ENTRY, str(tmp_path), str(marker)), env=child_env())
    assert result.stdout.strip().splitlines()[-1] == (
        f"{tmp_path / fsdp_checkpoint.SHARDED} {REFUSED} (it names exec): refused, nothing in it was run")
    assert not marker.exists(), "the crafted entry ran"


@pytest.mark.machinery
def test_the_crafted_files_would_run_code_without_the_checks(fsdp_checkpoint_folder, tmp_path):
    """Else the tests above prove nothing: loaded as torch and DCP load them unchecked, the payload runs."""
    import torch.distributed.checkpoint as dcp

    folder = copy_of(fsdp_checkpoint_folder, tmp_path)
    for number, name in enumerate([f"{fsdp_checkpoint.SHARDED}/.metadata", fsdp_checkpoint.HOST_STATE]):
        marker = tmp_path / f"ran-{number}"
        craft(folder / name, marker)
        assert not marker.exists()
        if name.endswith(".metadata"):
            dcp.FileSystemReader(str(folder / fsdp_checkpoint.SHARDED)).read_metadata()
        else:
            torch.load(folder / name, weights_only=False)
        assert marker.exists(), name


@pytest.mark.machinery
def test_the_metadata_check_allows_only_dcp_s_classes(fsdp_checkpoint_folder, tmp_path):
    modules = {module for module, _ in DCP_METADATA_CLASSES}
    assert modules <= {"torch", "torch.serialization", "torch.distributed.checkpoint.metadata",
                       "torch.distributed.checkpoint.filesystem", "pathlib", "collections", "builtins"}
    check_dcp_metadata(fsdp_checkpoint_folder / fsdp_checkpoint.SHARDED)  # the honest one passes
    for module, name, named in [("os", "system", "os.system"), ("torch", "load", "torch.load"),
                                ("builtins", "eval", "eval"), ("builtins", "getattr", "getattr")]:
        folder = tmp_path / f"{module}.{name}"
        folder.mkdir()
        (folder / ".metadata").write_bytes(b"c" + f"{module}\n{name}\n".encode() + b"(S'x'\ntR.")
        with pytest.raises(UnsafeCheckpoint, match=re.escape(f"(it names {named})")):
            check_dcp_metadata(folder)


def resume_with_one_crafted_file(checkpointed_run, tmp_path, name: str):
    """A copy of a trained run's checkpoint with `name` crafted, resumed by the command line: (result, path, marker)."""
    import shutil

    output = Path(shutil.copytree(checkpointed_run, tmp_path / "outputs"))
    folder = output / "checkpoints" / "epoch-2"
    if (folder / fsdp_checkpoint.SHARDED).is_dir():
        check_dcp_metadata(folder / fsdp_checkpoint.SHARDED)  # a real one (SPMD planners, on XLA) passes
    marker = tmp_path / "ran"
    craft(folder / name, marker)
    # Whoever crafts the file can write the manifest too: its check passes, the loading alone must refuse.
    manifest.write_manifest(folder, manifest.manifest_of(SimpleNamespace(process_index=0, num_processes=1), folder))
    command = python_command("--output_dir", str(output), *CHECKPOINTED_RUN, "--num_epochs", "3", "--resume", "true")
    return run(command, env=checkpointed_env(), check=False), folder / name, marker


def assert_one_line_refusal(result, path: Path, marker: Path) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert said == [f"error: {path} {REFUSED} (it names exec): refused, nothing in it was run"], said
    assert not marker.exists(), "the crafted file ran"


@pytest.mark.xla
@pytest.mark.layout("data")
@pytest.mark.machinery
def test_resume_refuses_a_crafted_optimizer_file_in_one_line(checkpointed_run, tmp_path):
    result, path, marker = resume_with_one_crafted_file(checkpointed_run, tmp_path, "optimizer.bin")
    assert_one_line_refusal(result, path, marker)


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.machinery
def test_resume_refuses_a_crafted_sharded_metadata_in_one_line(checkpointed_run, tmp_path):
    result, path, marker = resume_with_one_crafted_file(checkpointed_run, tmp_path, f"{fsdp_checkpoint.SHARDED}/.metadata")
    assert_one_line_refusal(result, path, marker)
