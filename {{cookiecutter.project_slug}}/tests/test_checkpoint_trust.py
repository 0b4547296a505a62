"""Checkpoints you can trust: a damaged file is named and an older checkpoint taken, a resume that would load other
shapes is refused, and one with settings changed on purpose says what the run now does.

The manifest is checked against an independent answer (hashlib over the files on disk); the damage is done by hand
to every file a real checkpoint of this project's layout holds (4 SPMD devices in an fsdp project). The schedule
after a change is compared with a schedule built afresh at the new settings.
"""

import hashlib
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import (
    CHECKPOINTED_RUN,
    PARALLELISM,
    PROJECT,
    TASK,
    checkpointed_env,
    child_env,
    python_command,
    run,
    train,
)

from {{ cookiecutter.project_slug }}.fault_tolerance import manifest, resume
from {{ cookiecutter.project_slug }}.fault_tolerance.resume_changes import apply_changes
from {{ cookiecutter.project_slug }}.loop.run_state import RunState

pytestmark = pytest.mark.machinery  # in the classifier project of the data layout, and:
# of each layout: the tests of what a checkpoint holds, whose files are the layout's (tests/conftest.py's `elsewhere`).
IN_EACH_LAYOUT = pytest.mark.layout(PARALLELISM)
RUN = CHECKPOINTED_RUN
ONE_PROCESS = SimpleNamespace(process_index=0, num_processes=1)
env = checkpointed_env


@pytest.fixture
def trained(checkpointed_run) -> Path:
    return checkpointed_run


def copied(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "outputs"))


def files_of(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def snapshot(output: Path) -> dict:
    # torch_xla's compilation analysis log is rewritten by every run that reaches the device, a refused one too.
    return {name: (output / name).stat().st_mtime_ns for name in files_of(output) if not name.startswith("xla-")}


def resume_run(output: Path, *extra):
    return run(python_command("--output_dir", str(output), *RUN, "--resume", "true", *extra), env=env(), check=False)


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


@IN_EACH_LAYOUT
def test_every_file_of_a_checkpoint_is_in_its_manifest_with_its_size_and_sha256(trained):
    for name in ("epoch-1", "epoch-2"):
        folder = trained / "checkpoints" / name
        written = json.loads((folder / manifest.MANIFEST).read_text())["files"]
        assert sorted(written) == [file for file in files_of(folder) if file != manifest.MANIFEST]
        for file, entry in written.items():
            data = (folder / file).read_bytes()
            assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, file
        assert manifest.damage(ONE_PROCESS, folder) is None


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": (lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]), ("bytes", "read")),
    "a byte flipped": (flip_a_byte, ("sha256 mismatch", "read", "its own checksum")),
    "deleted": (Path.unlink, ("is missing", "has no manifest.json")),
}


@IN_EACH_LAYOUT
@pytest.mark.parametrize("damage", DAMAGE)
def test_each_kind_of_file_damaged_is_named(trained, tmp_path, damage):
    do, said = DAMAGE[damage]
    source = trained / "checkpoints" / "epoch-2"
    for name in files_of(source):
        folder = Path(shutil.copytree(source, tmp_path / name.replace("/", "-")))
        do(folder / name)
        problem = manifest.damage(ONE_PROCESS, folder)
        assert problem is not None and name.split("/")[-1] in problem and any(word in problem for word in said), \
            (name, problem)


@IN_EACH_LAYOUT
def test_a_damaged_newest_checkpoint_is_named_and_the_older_one_resumed(trained, tmp_path):
    output = copied(trained, tmp_path)
    newest = output / "checkpoints" / "epoch-2"
    biggest = max(files_of(newest), key=lambda name: (newest / name).stat().st_size)  # weights or a shard
    (newest / biggest).write_bytes((newest / biggest).read_bytes()[:1000])
    result = resume_run(output, "--num_epochs", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resume: checkpoint {newest} is damaged: {biggest} has 1000 bytes, the manifest says" in result.stdout
    assert f"resume: continuing after epoch 1 from {output / 'checkpoints' / 'epoch-1'}" in result.stdout
    report = json.loads((output / "report.json").read_text())
    assert report["epochs_run"] == 2 and report["checkpoint"] == str(output / "checkpoints" / "epoch-3")
    assert manifest.damage(ONE_PROCESS, output / "checkpoints" / "epoch-2") is None  # written again, whole


@IN_EACH_LAYOUT
@pytest.mark.slow
def test_with_no_intact_checkpoint_the_run_stops_with_status_2_and_writes_nothing(trained, tmp_path):
    """Through accelerate launch where the layout has it (data): the same status as train.py."""
    output = copied(trained, tmp_path)
    flip_a_byte(output / "checkpoints" / "epoch-2" / "progress.json")
    (output / "checkpoints" / "epoch-1" / "settings.json").unlink()
    before = snapshot(output)
    if PARALLELISM == "data":
        entry = ["train.py"] if (PROJECT / "train.py").exists() else ["-m", "{{ cookiecutter.project_slug }}.cli"]
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/xla-cpu.yaml",
                   *entry, "--output_dir", str(output), *RUN, "--resume", "true"]
        result = run(command, env=child_env(PJRT_DEVICE="CPU"), check=False)
    else:
        result = resume_run(output)
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors(result) == [
        f"error: resume: no intact checkpoint in {output / 'checkpoints'} (epoch-2: progress.json differs from what "
        "was written (sha256 mismatch); epoch-1: settings.json is missing): --overwrite_output_dir starts over"
    ]
    assert "Traceback" not in result.stderr
    assert snapshot(output) == before


OTHER_TASK = "text-classification" if TASK == "causal-lm" else "causal-lm"


def from_other_task(checkpoint: Path) -> None:
    """Make `checkpoint` one of the other task's (its settings say so), its manifest written again to match."""
    settings = json.loads((checkpoint / "settings.json").read_text())
    (checkpoint / "settings.json").write_text(json.dumps({**settings, "task": OTHER_TASK}))
    manifest.write_manifest(checkpoint, manifest.manifest_of(ONE_PROCESS, checkpoint))


@pytest.mark.parametrize(("change", "extra", "said"), [
    (None, ["--max_seq_length", "64"], "max_seq_length was 32 in checkpoint NEWEST, this run has 64 (the position "
                                       "embeddings' use and the data's rows)"),
    (from_other_task, [], f"task was {OTHER_TASK!r} in checkpoint NEWEST, this run has {TASK!r} (the task)"),
])
def test_a_resume_that_would_load_other_shapes_is_refused_in_one_line(trained, tmp_path, change, extra, said):
    output = copied(trained, tmp_path)
    newest = output / "checkpoints" / "epoch-2"
    if change:
        change(newest)
    before = snapshot(output)
    result = resume_run(output, *extra)
    assert result.returncode == 2, result.stderr[-3000:]
    assert errors(result) == [f"error: resume: {said.replace('NEWEST', str(newest))}: resume with the same value, or start over in "
                              "another --output_dir"]
    assert "Traceback" not in result.stderr and snapshot(output) == before


@IN_EACH_LAYOUT
def test_a_checkpoint_records_what_its_weights_mean(trained):
    recorded = resume.read_settings(trained / "checkpoints" / "epoch-2")
    assert {name: recorded[name] for name in ("task", "parallelism", "max_seq_length", "stored_dtype", "demo")} == {
        "task": TASK, "parallelism": PARALLELISM, "max_seq_length": 32, "stored_dtype": "float32", "demo": True}
    assert recorded["examples_per_step"] == 4 * (4 if PARALLELISM == "fsdp" else 1)  # 4 a chip, on every chip


@pytest.mark.parametrize("name", sorted(resume.REFUSED))
def test_each_setting_that_changes_what_the_weights_mean_is_refused(name):
    recorded, now = {name: "old", "other": 1}, {name: "new", "other": 2}
    with pytest.raises(resume.ResumeRefused, match=rf"^resume: {name} was 'old' in checkpoint here, this run has 'new' "):
        resume.check_settings(Path("here"), recorded, now)
    resume.check_settings(Path("here"), recorded, {**now, name: "old"})  # others may change


@pytest.mark.parametrize("pointer", ["", "epoch-9"])
def test_an_empty_or_dangling_latest_is_said_and_every_checkpoint_considered(trained, tmp_path, pointer):
    output = copied(trained, tmp_path)
    (output / "checkpoints" / "LATEST").write_text(pointer)
    said = []
    assert resume.candidates(output, said.append) == ["epoch-2", "epoch-1"]
    assert said == [f"resume: {output / 'checkpoints' / 'LATEST'} " + ("is empty" if not pointer else
                    "names 'epoch-9', which is not there") + "; looking at every checkpoint there"]


def schedule(rate: float, steps: int, taken: int):
    """transformers' linear schedule with 2 warm-up steps over `steps`, `taken` steps into it (an independent copy)."""
    import torch
    from transformers import get_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=rate)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=2, num_training_steps=steps)
    for _ in range(taken):
        optimizer.step()
        scheduler.step()
    return scheduler


@pytest.mark.parametrize(("change", "expected_step", "said"), [
    ({"learning_rate": 1e-4, "num_epochs": 3}, 8, [
        "resume: learning_rate 0.001 -> 0.0001: the schedule's peak from here on",
        "resume: num_epochs 2 -> 3: the run now ends after optimizer step 30",
        "resume: the schedule (linear, peak 0.0001) goes on at step 8 of 30: learning rate 7.857e-05 now"]),
    ({"train_batch_size": 2, "examples_per_step": 2}, 16, [
        "resume: train_batch_size 4 -> 2",
        "resume: 4 -> 2 examples a step: the 32 examples trained are step 16 now; the resumed epoch skips its first 12 "
        "examples",
        "resume: the schedule (linear, peak 0.001) goes on at step 16 of 30: learning rate 0.0005 now"]),
])
def test_a_changed_setting_moves_the_schedule_to_where_the_new_one_is_and_says_so(change, expected_step, said):
    recorded = {"learning_rate": 1e-3, "num_epochs": 2, "train_batch_size": 4, "examples_per_step": 4,
                "lr_scheduler_type": "linear", "task": TASK}
    now = {**recorded, **change}
    loaded = schedule(1e-3, 20, 8)  # the checkpoint's schedule, 8 steps in, loaded into this run's new one
    resumed = schedule(now["learning_rate"], 30, 0)
    resumed.load_state_dict(loaded.state_dict())
    run = RunState(steps_per_epoch=10, examples_per_step=now["examples_per_step"], num_epochs=3, last_step=30)
    run.global_step, run.resumed_step, run.resumed_loss = 8, 3, 300
    lines = []
    apply_changes(recorded, now, run, resumed, 1, lines.append)
    assert lines == said
    assert run.global_step == expected_step
    assert resumed.get_last_lr() == schedule(now["learning_rate"], 30, expected_step).get_last_lr()
    assert resumed.optimizer.param_groups[0]["lr"] == resumed.get_last_lr()[0]


@pytest.mark.compares("bit for bit", "eval loss and accuracy: a resume that only evaluates the last step's weights "
                      "against the run's own evaluation")
def test_a_checkpoint_after_the_last_step_resumes_to_the_epoch_s_evaluation_and_checkpoint(tmp_path):
    """As a preemption can leave it: the run's last step trained and saved, its epoch's evaluation not yet done."""
    report, _ = train(tmp_path, *RUN, "--save_steps", "32")  # 16 steps an epoch: step-32 is the last step
    checkpoints = tmp_path / "outputs" / "checkpoints"
    assert resume.candidates(tmp_path / "outputs", print) == ["epoch-2", "step-32"]
    shutil.rmtree(checkpoints / "epoch-2")
    (checkpoints / "LATEST").write_text("step-32")
    (tmp_path / "outputs" / "report.json").unlink()
    result = resume_run(tmp_path / "outputs")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resume: continuing after epoch 1, step 16 of epoch 2" in result.stdout
    resumed = json.loads((tmp_path / "outputs" / "report.json").read_text())
    assert resumed["epochs_run"] == 1 and resumed["checkpoint"] == str(checkpoints / "epoch-2")
    assert {key: resumed[key] for key in ("eval_loss", "eval_accuracy")} == {
        key: report[key] for key in ("eval_loss", "eval_accuracy")}
