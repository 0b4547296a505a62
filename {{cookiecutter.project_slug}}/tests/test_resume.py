"""Preemption: a run killed anywhere resumes from its last complete checkpoint to the same result.

One uninterrupted run is the reference. Another run is SIGKILLed three times, each time
restarted with --resume, and must end with exactly the reference's weights and metrics.
Every kill and signal lands at a point the run waits at until the test has acted, never in a race against the
steps after it: after a chosen optimizer step (conftest.STEP_DOOR: between epochs is after epoch 2's first step, in a
training step is after one inside epoch 2) and in a save (PAUSE_IN_SAVE, injected by this test, holds a fully staged,
not yet committed checkpoint open).

All of it is the loop's machinery, tested in the text-classification project of the data layout (tests/conftest.py;
test_fsdp.py and test_hosts.py resume the fsdp layout's sharded checkpoints), except a SIGTERM in the middle of an
epoch and its resume, which each task's data-layout project runs on its own batches.
"""

import json
import signal
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    METRIC,
    RUN_CLI,
    STEP_DOOR,
    StepDoor,
    assert_same_weights_and_optimizer_state,
    child_env,
    python_code,
    python_command,
    resumed_from_step,
    run,
    start,
)

from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST, CheckpointProblem, check_writable, read_progress
from {{ cookiecutter.project_slug }}.fault_tolerance.preemption import PREEMPTED_EXIT
from {{ cookiecutter.project_slug }}.watch import curves

# Checkpoints of the data layout (the fsdp layout's sharded ones resume in test_fsdp.py and test_hosts.py).
pytestmark = pytest.mark.layout("data")

EPOCHS = 2
LOGGING_STEPS = 3  # logs at steps 3 and 6 of epoch 1, 9, 12 and 15 of epoch 2: a resumed run appends after its step
# Tiny and quick, with 8 steps per epoch so that a kill in a step lands inside the epoch. Each step accumulates 2
# micro-batches of 4 (--gradient_accumulation_steps): a signal that lands while they train (one graph with the
# update) stops the run after that step, and every kill point below resumes an accumulating run.
RUN = [
    "--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--num_epochs", str(EPOCHS),
    "--train_batch_size", "4", "--gradient_accumulation_steps", "2", "--eval_batch_size", "8", "--mixed_precision",
    "no", "--compilation_cache", "false", "--max_recompilations", "0", "--logging_steps", str(LOGGING_STEPS),
]
RESUME = [*RUN, "--resume", "true"]
WEIGHTS = "pytorch_model.bin"
METRICS = (METRIC, "eval_loss", "eval_examples_counted")


def latest(output) -> str | None:
    pointer = output / "checkpoints" / LATEST
    return pointer.read_text().strip() if pointer.is_file() else None


def weights(folder):
    return torch.load(folder / WEIGHTS, map_location="cpu", weights_only=True)


def assert_same_weights(found, expected):
    assert found.keys() == expected.keys()
    for name in expected:
        assert torch.equal(found[name], expected[name]), f"{name} differs from the uninterrupted run"


def save_state_replaced(body: str) -> str:
    """Code that replaces Accelerate's save_state with `body` (which may call `original`)."""
    return f"""
import errno, os, time
import accelerate

original, calls = accelerate.Accelerator.save_state, []

def save_state(self, output_dir=None, **kwargs):
{textwrap.indent(textwrap.dedent(body).strip(), "    ")}

accelerate.Accelerator.save_state = save_state
"""


def cli_with_save_state(body: str) -> str:
    """The training command line with Accelerate's save_state replaced by `body` (which may call `original`)."""
    return save_state_replaced(body) + RUN_CLI


# Every file of the checkpoint staged, nothing committed yet: held there to be signalled or killed.
# TEST_PAUSE_FROM_SAVE: the first save that pauses (1: every one); there it makes the file TEST_PAUSED (the test's
# signal to act: an event, not a time) and waits until the file TEST_PAUSE_UNTIL exists (the test makes it once its
# signal is sent), at most 120 s (a guard against a hang, never reached).
PAUSE_IN_SAVE = save_state_replaced("""
    calls.append(output_dir)
    saved = original(self, output_dir, **kwargs)
    if len(calls) >= int(os.environ.get("TEST_PAUSE_FROM_SAVE", "1")):
        open(os.environ["TEST_PAUSED"], "w").close()
        release, deadline = os.environ.get("TEST_PAUSE_UNTIL"), time.monotonic() + 120
        while not (release and os.path.exists(release)) and time.monotonic() < deadline:
            time.sleep(0.01)
    return saved
""")


# Ctrl-C in a terminal: the command line with Python's own SIGINT handler in place (a test runner's worker may
# ignore SIGINT, and a child inherits that).
CTRL_C = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
"""


class Watched:
    """A training run in a child process whose output is read while it runs (from the files it writes).

    `pause_at_step`: the run waits after that optimizer step (conftest.STEP_DOOR) until the test acts; `pause_in_save`:
    in its save (PAUSE_IN_SAVE); `ctrl_c`: with Python's own SIGINT handler, as in a terminal."""

    def __init__(self, output, args, pause_in_save=False, pause_at_step=None, ctrl_c=False, **env):
        arguments = ("--output_dir", str(output), *args)
        logs = Path(tempfile.mkdtemp(prefix="watched-", dir=output.parent))
        self.out, self.err, self.paused = logs / "stdout", logs / "stderr", logs / "paused-in-save"
        self.door = StepDoor(logs / "door", pause_at_step or 0)
        code = "".join(piece for piece, wanted in ((CTRL_C, ctrl_c), (STEP_DOOR, pause_at_step),
                                                   (PAUSE_IN_SAVE, pause_in_save)) if wanted)
        command = python_code(code + RUN_CLI, *arguments) if code else python_command(*arguments)
        self.process = start(command, child_env(PYTHONUNBUFFERED="1", TEST_PAUSED=str(self.paused), **self.door.env,
                                                **env), self.out, self.err)

    @property
    def stderr(self) -> bytes:
        return self.err.read_bytes()

    def text(self) -> str:
        return (self.out.read_bytes() + self.err.read_bytes()).decode(errors="replace")

    def signal_when(self, ready, number, timeout=900, then=None) -> tuple[int, str]:
        """Send signal `number` as soon as ready() holds (fail if the run ends first), then call `then()`;
        (exit status, output)."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                pytest.fail(f"the run ended before its kill point ({self.process.returncode}):\n{self.text()[-4000:]}")
            time.sleep(0.01)
        self.process.send_signal(number)
        if then:
            then()
        self.process.wait(timeout=600)
        return self.process.returncode, self.text()

    def signal_at_the_door(self, number) -> tuple[int, str]:
        """Send signal `number` while the run waits after its step (pause_at_step), then let it go on."""
        return self.signal_when(self.door.waiting, number, then=self.door.release)

    def kill_when(self, ready, timeout=900) -> str:
        """SIGKILL the run as soon as ready() holds; fail if it ends first."""
        code, text = self.signal_when(ready, signal.SIGKILL, timeout)
        assert code == -signal.SIGKILL
        return text


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: (final checkpoint folder, report)."""
    output = tmp_path_factory.mktemp("uninterrupted")
    run(python_command("--output_dir", str(output), *RUN))
    report = json.loads((output / "report.json").read_text())
    return output / "checkpoints" / f"epoch-{EPOCHS}", report


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "weights, metrics and logs: killed three times and resumed against the "
                      "uninterrupted run")
def test_killed_three_times_resumes_to_the_uninterrupted_result(reference, tmp_path):
    """Also issue 3's promise: a run stopped after epoch 1 and resumed ends with the same weights."""
    final, expected = reference
    output = tmp_path / "outputs"
    checkpoints = output / "checkpoints"

    # 1. Between epochs: epoch 1 is committed, epoch 2 has begun (killed after its first step, global step 9).
    between = Watched(output, RUN, pause_at_step=9)
    between.kill_when(between.door.waiting)
    assert latest(output) == "epoch-1" and not (checkpoints / "epoch-2").exists()

    # 2. In a training step of epoch 2, after the resumed run has taken some (killed after its third, step 11).
    resumed = Watched(output, RESUME, pause_at_step=3)
    log = resumed.kill_when(resumed.door.waiting)
    assert "resume: continuing after epoch 1" in log
    assert "taking over the lock of process" in log and "that process is no longer running" in log  # run_lock.py
    assert latest(output) == "epoch-1" and not (checkpoints / "epoch-2").exists()
    assert not (checkpoints / ".epoch-2.partial").exists(), "the kill came after training, not in a step"

    # 3. In the save of epoch 2: every file staged, nothing committed yet.
    saving = Watched(output, RESUME, pause_in_save=True)
    log = saving.kill_when(saving.paused.is_file)
    assert "resume: continuing after epoch 1" in log
    assert latest(output) == "epoch-1" and not (checkpoints / "epoch-2").exists()
    assert (checkpoints / ".epoch-2.partial").is_dir()

    # 4. Resume to the end.
    result = run(python_command("--output_dir", str(output), *RESUME))
    report = json.loads((output / "report.json").read_text())
    assert_same_logs(output, final.parent.parent, resumed_at=8)
    assert "resume: continuing after epoch 1" in result.stdout
    assert latest(output) == "epoch-2" and not (checkpoints / ".epoch-2.partial").exists()
    assert report["epochs_run"] == 1
    assert_same_weights(weights(checkpoints / "epoch-2"), weights(final))
    assert {name: report[name] for name in METRICS} == {name: expected[name] for name in METRICS}


def resume_to_the_end(output, expected, final, resumed_at: int):
    """Resume to the end: the same weights, metrics and logs as the uninterrupted run."""
    result = run(python_command("--output_dir", str(output), *RESUME))
    report = json.loads((output / "report.json").read_text())
    assert_same_weights(weights(output / "checkpoints" / f"epoch-{EPOCHS}"), weights(final))
    assert {name: report[name] for name in METRICS} == {name: expected[name] for name in METRICS}
    assert_same_logs(output, final.parent.parent, resumed_at)
    return result, report


def assert_same_logs(output, uninterrupted, resumed_at: int) -> None:
    """metrics.jsonl after resuming from global step `resumed_at`: each step's line once, as the uninterrupted run's.
    A log whose window reaches back past that step covers only the steps since it; every other one is the same."""
    lines = [[json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
             for folder in (output, uninterrupted)]
    found, expected = ([(record["step"], "eval_loss" in record) for record in records] for records in lines)
    assert found == expected, (found, expected)
    for record, reference in zip(*lines, strict=True):
        if "eval_loss" in record:
            assert record["eval_loss"] == reference["eval_loss"]
            continue
        assert record["learning_rate"] == reference["learning_rate"]
        epoch_start = (record["step"] - 1) // 8 * 8
        if max(record["step"] - LOGGING_STEPS, epoch_start) >= resumed_at:
            assert (record["loss"], record["grad_norm"]) == (reference["loss"], reference["grad_norm"]), record
    # TensorBoard, written by both runs into one folder: each step once (the resumed run's purge_step drops the
    # interrupted run's events past its checkpoint), as the uninterrupted run's.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for tag, kind in (("train/learning_rate", False), ("eval/loss", True)):
        events = EventAccumulator(str(output / "tensorboard"))
        events.Reload()
        steps = [scalar.step for scalar in events.Scalars(tag)]
        assert steps == [step for step, evaluation in expected if evaluation == kind], (tag, steps)
    # curves.png, drawn by the resumed run from the same file: each of its lines holds each step once. The figure is
    # the one draw() saves (watch/curves.py), read before saving: a PNG's pixels would not say which steps it holds.
    assert (output / curves.CURVES_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    loss, metric, rate = curves.plotted(lines[0]).axes
    logged, evaluated = ([step for step, evaluation in expected if evaluation == kind] for kind in (False, True))
    for line, steps in ((loss.lines[0], logged), (loss.lines[1], evaluated), (metric.lines[0], evaluated),
                        (rate.lines[0], logged)):
        assert list(line.get_xdata()) == steps, (line.get_label(), list(line.get_xdata()))


@pytest.mark.xla
@pytest.mark.parametrize("point", [
    pytest.param("early-in-epoch-1", marks=pytest.mark.machinery),
    "mid-epoch-2",  # also a task's own: a causal-LM project resumes inside an epoch of packed blocks
    pytest.param("during-the-epoch-1-save", marks=pytest.mark.machinery),
    pytest.param("ctrl-c-mid-epoch-2", marks=pytest.mark.machinery),  # SIGINT: Ctrl-C, as the README promises
])
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "weights, metrics and logs: stopped by a signal and resumed against the "
                      "uninterrupted run")
def test_sigterm_stops_at_a_step_with_a_checkpoint_and_resume_ends_as_the_uninterrupted_run(reference, tmp_path, point):
    """A preemption's SIGTERM (or a Ctrl-C): the step in flight finishes, a checkpoint is written, the exit status
    says so."""
    final, expected = reference
    output = tmp_path / "outputs"
    signal_name = "SIGINT" if point.startswith("ctrl-c") else "SIGTERM"
    if point == "during-the-epoch-1-save":
        release = tmp_path / "signal-sent"
        watched = Watched(output, RUN, pause_in_save=True, TEST_PAUSE_UNTIL=str(release))
        code, text = watched.signal_when(watched.paused.is_file, signal.SIGTERM, then=release.touch)
    else:
        # The signal lands while the run waits after this step, before its boundary: it stops exactly there.
        epoch, step = (1, 1) if point == "early-in-epoch-1" else (2, 4)
        watched = Watched(output, RUN, pause_at_step=(epoch - 1) * 8 + step, ctrl_c=point.startswith("ctrl-c"))
        code, text = watched.signal_at_the_door(getattr(signal, signal_name))
    assert code == PREEMPTED_EXIT, text[-4000:]
    name = latest(output)
    progress = read_progress(output / "checkpoints" / name)
    (line,) = [line for line in text.splitlines() if line.startswith("stopped: ")]
    assert line.startswith(f"stopped: preempted ({signal_name}) at epoch {progress['epochs_done'] + (progress['epoch_step'] > 0)} ")
    assert line.endswith(f"checkpoint {output / 'checkpoints' / name} written; run again with --resume to continue "
                         "from the next batch")
    if point == "during-the-epoch-1-save":
        assert (name, progress["epochs_done"], progress["epoch_step"]) == ("epoch-1", 1, 0)
    else:
        assert (name, progress["epochs_done"], progress["epoch_step"]) == (f"step-{(epoch - 1) * 8 + step}", epoch - 1, step)
    result, report = resume_to_the_end(output, expected, final, progress["global_step"])
    if progress["epoch_step"]:
        assert f"step {progress['epoch_step']} of epoch {progress['epochs_done'] + 1}" in result.stdout


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "weights and optimizer state in pure bf16 with Kahan summation: resumed from a "
                      "step checkpoint against the uninterrupted run (the same steady step)")
def test_the_kahan_optimizer_resumes_from_a_step_checkpoint_bit_for_bit(tmp_path):
    """bf16 weights with Kahan summation (optimi's AdamW): the compensation buffers are optimizer state, saved and
    loaded with it, so a run resumed at step 3 ends with the uninterrupted run's weights and optimizer state."""
    kahan = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--num_epochs", "1",
             "--train_batch_size", "8", "--mixed_precision", "bf16", "--pure_bf16", "cast", "--kahan_summation", "true",
             "--compilation_cache", "false", "--max_recompilations", "0"]
    uninterrupted = tmp_path / "uninterrupted"
    run(python_command("--output_dir", str(uninterrupted), *kahan, "--save_steps", "3", "--keep_checkpoints", "4"))
    output = tmp_path / "resumed"
    result = resumed_from_step(uninterrupted, output, 3, *kahan)
    assert "resume: continuing after epoch 0, step 3 of epoch 1" in result.stdout
    final = [folder / "checkpoints" / "epoch-1" for folder in (uninterrupted, output)]
    optimizer = torch.load(final[0] / "optimizer.bin", map_location="cpu", weights_only=True)["state"]
    assert any("kahan_comp" in state for state in optimizer.values())
    assert_same_weights_and_optimizer_state(final[1], final[0])


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "weights, metrics and logs: killed in a step checkpoint's save and resumed "
                      "against the uninterrupted run")
def test_sigkill_during_a_step_checkpoint_keeps_the_previous_one(reference, tmp_path):
    final, expected = reference
    output = tmp_path / "outputs"
    # Step checkpoints at steps 3 and 6; the second one is killed while staged.
    saving = Watched(output, [*RUN, "--save_steps", "3"], pause_in_save=True, TEST_PAUSE_FROM_SAVE="2")
    saving.kill_when(saving.paused.is_file)
    assert latest(output) == "step-3"
    assert read_progress(output / "checkpoints" / "step-3")["epoch_step"] == 3
    result, _ = resume_to_the_end(output, expected, final, resumed_at=3)
    assert "resume: continuing after epoch 0, step 3 of epoch 1" in result.stdout


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "metrics with step checkpoints against the run without them (the same graphs)")
def test_step_checkpoints_add_no_graph_keep_the_newest_and_report_their_cost(reference, tmp_path):
    _, expected = reference
    output = tmp_path / "outputs"
    run(python_command("--output_dir", str(output), *RUN, "--save_steps", "3", "--keep_checkpoints", "3"))
    report = json.loads((output / "report.json").read_text())
    assert report["xla_compilations"] == expected["xla_compilations"]  # the reference saves after epochs only
    assert report["checkpoints_written"] == 16 // 3 + EPOCHS  # steps 3, 6, ..., 15 and both epochs
    assert report["checkpoint_seconds"] > 0
    assert {name: report[name] for name in METRICS} == {name: expected[name] for name in METRICS}
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == [LATEST, "epoch-2", "step-12", "step-15"]


def tmpfs(folder, size_bytes) -> bool:
    """Mount a tiny RAM disk at folder (needs root and CAP_SYS_ADMIN); False where that is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    size = f"{-(-size_bytes // 4096) * 4}k"
    try:
        command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
        return subprocess.run(command, capture_output=True).returncode == 0
    except OSError:  # no mount command
        return False


# Where a RAM disk cannot be mounted: the second save_state fails the way a full disk makes it fail.
FULL_DISK_ON_SECOND_SAVE = cli_with_save_state("""
    calls.append(output_dir)
    if len(calls) == 2:
        with open(output_dir + "/pytorch_model.bin", "wb") as handle:
            handle.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")
    return original(self, output_dir, **kwargs)
""")


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "epoch 1's weights of a run whose second save met a full disk against the "
                      "uninterrupted run's")
def test_disk_full_during_save_keeps_previous_checkpoint(reference, tmp_path):
    final, _ = reference
    first = final.parent / "epoch-1"
    output = tmp_path / "disk"
    # Room for epoch 1's checkpoint and half of another: epoch 2's save runs out of space.
    mounted = tmpfs(output, sum(path.stat().st_size for path in first.iterdir()) * 3 // 2)
    try:
        args = ("--output_dir", str(output), *RUN)
        command = python_command(*args) if mounted else python_code(FULL_DISK_ON_SECOND_SAVE, *args)
        result = run(command, check=False)
        assert result.returncode == 2, result.stderr[-4000:]
        assert "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, result.stderr[-4000:]
        assert errors[0].startswith(f"error: cannot write checkpoint {output / 'checkpoints' / 'epoch-2'}: ")
        assert errors[0].endswith(f"the previous checkpoint {output / 'checkpoints' / 'epoch-1'} is intact")
        # A real full disk reaches torch.save as a RuntimeError, which the message translates; the stand-in (no RAM
        # disk allowed here) raises the OSError itself, whose reason is said as it is.
        said = "the disk is full (" if mounted else ": No space left on device ("
        assert said in errors[0], (mounted, errors[0])
        assert latest(output) == "epoch-1"
        assert not (output / "checkpoints" / ".epoch-2.partial").exists()
        assert_same_weights(weights(output / "checkpoints" / "epoch-1"), weights(first))
    finally:
        if mounted:
            subprocess.run(["umount", str(output)], check=True)


@pytest.mark.parametrize("where", ["under-a-file", "is-a-file", "proc"])
@pytest.mark.machinery
def test_unwritable_output_dir_is_named(tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    output = {"under-a-file": blocker / "outputs", "is-a-file": blocker, "proc": "/proc/outputs"}[where]
    with pytest.raises(CheckpointProblem, match=r"^output_dir='.*' is not writable: "):
        check_writable(output)


@pytest.mark.xla
@pytest.mark.machinery
def test_unwritable_output_dir_fails_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run(python_command("--output_dir", str(blocker / "outputs"), *RUN), check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: output_dir='{blocker / 'outputs'}' is not writable: Not a directory"]
    assert "epoch 1/" not in result.stderr + result.stdout
    assert blocker.read_text() == "not a folder"


@pytest.mark.xla
@pytest.mark.parametrize("where", ["under-a-file", "a-folder"])
@pytest.mark.machinery
def test_unwritable_report_path_fails_before_training(tmp_path, where):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    report = {"under-a-file": blocker / "report.json", "a-folder": tmp_path}[where]
    reason = {"under-a-file": f"{blocker} is a file, not a folder", "a-folder": "Is a directory"}[where]
    result = run(python_command("--output_dir", str(tmp_path / "outputs"), "--report", str(report), *RUN), check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: report='{report}' is not writable: {reason}"]
    assert "epoch 1/" not in result.stderr + result.stdout


@pytest.mark.machinery
def test_stop_signals_are_noted_not_raised_and_a_second_one_acts_as_usual():
    """SIGTERM and SIGINT (Ctrl-C) inside the loop only set a flag; the loop stops at the next step boundary."""
    import os

    from {{ cookiecutter.project_slug }}.fault_tolerance.preemption import StopSignals

    # A known handler before (the one inherited depends on how the tests were started: a background job ignores SIGINT).
    reached_the_usual_handler = []
    before = signal.signal(signal.SIGINT, lambda number, frame: reached_the_usual_handler.append(number))
    term_before = signal.getsignal(signal.SIGTERM)
    try:
        with StopSignals() as signals:
            os.kill(os.getpid(), signal.SIGINT)
            assert (signals.received, signals.name) == (signal.SIGINT, "SIGINT")
            assert reached_the_usual_handler == []  # noted, not acted on
            os.kill(os.getpid(), signal.SIGINT)  # the second one goes to the usual handler again
            assert reached_the_usual_handler == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == term_before  # put back on the way out
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.machinery
def test_save_policy_by_steps_and_by_minutes(monkeypatch):
    from {{ cookiecutter.project_slug }}.fault_tolerance import checkpoint_schedule

    clock = [1000.0]
    monkeypatch.setattr(checkpoint_schedule.time, "monotonic", lambda: clock[0])
    by_steps = checkpoint_schedule.SavePolicy(save_steps=3, save_minutes=None)
    assert [step for step in range(1, 10) if by_steps.due(step)] == [3, 6, 9]
    by_time = checkpoint_schedule.SavePolicy(save_steps=None, save_minutes=2)
    clock[0] += 119
    assert not by_time.due(1)
    clock[0] += 1
    assert by_time.due(2)
    by_time.saved()
    assert not by_time.due(3)
    assert not checkpoint_schedule.SavePolicy(None, None).due(100)
