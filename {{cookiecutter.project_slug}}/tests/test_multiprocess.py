"""Several processes train as one run: one schedule, one decision, each eval example once, one voice.

Every real TPU run has several processes (8 on a v5e-8, 8 per host on a pod). torch_xla 2.9 cannot
run several processes on the CPU, so these run as gloo workers forked by notebook_launcher with
torch_xla hidden: the same training function, the same Accelerate calls (prepared loaders,
scheduler, reductions, broadcasts), on another backend.
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import METRIC, TASK, eval_examples, evaluate_on_cpu, quick, train_in_workers

from {{ cookiecutter.project_slug }}.config import TrainConfig

pytestmark = [pytest.mark.workers, pytest.mark.layout("data"), pytest.mark.machinery, pytest.mark.slow]

# QUICK with 2 epochs, in float32 (bf16 on a plain CPU is autocast, slow and beside the point here).
RUN = quick("--num_epochs", "2", "--mixed_precision", "no", "--checkpoint", "false", "--logging_steps", "3")
NO_DEMO_FLAG = [arg for index, arg in enumerate(RUN) if "--demo" not in RUN[max(index - 1, 0):index + 1]]
# The first frame of each progress bar (printed when the bar is made, at 00:00 elapsed: a later refresh
# of a slow bar shows more time) and each message.
ONCE_PER_RUN = {
    "tokenizing bars": r"Map:\s+0%\|[^|]*\| 0/\d+ \[00:00<\?",
    "epoch bars": r"epoch \d/\d:\s+0%\|[^|]*\| 0/\d+ \[00:00<\?",
    "epoch summaries": r"epoch \d/\d: train loss",
    "report tables": r"eval_examples_counted\s+\d",
    "demo decisions": r"The hub cannot be reached",
}


def counts(text: str) -> dict:
    return {name: len(re.findall(pattern, text)) for name, pattern in ONCE_PER_RUN.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same quick run in 1, 2 and 3 processes, the demo chosen by the main process alone."""
    found = {}

    def get(processes):
        if processes not in found:
            folder = tmp_path_factory.mktemp(f"processes-{processes}")
            found[processes] = train_in_workers(folder, processes, *NO_DEMO_FLAG)
        return found[processes]

    return get


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_learning_rate_follows_one_linear_schedule_at_any_process_count(runs, processes):
    report, _, rates = runs(processes)
    # The demo's global batch (16) split over the processes (5 each for 3: 15 in all), drop_last, 2 epochs.
    steps = 96 // (TrainConfig().per_chip_train_batch(True, processes) * processes) * 2
    assert report["num_processes"] == processes
    assert report["learning_rate"]["optimizer_steps"] == steps
    assert sorted(rates) == list(range(processes))
    initial = report["learning_rate"]["first_step"]
    expected = [initial * (1 - step / steps) for step in range(steps)]
    for process, used in rates.items():
        assert used == pytest.approx(expected, rel=1e-9), f"process {process}"
        assert min(used) > 0, f"process {process}: a learning rate of 0 before the last step"
    assert report["learning_rate"]["last_step"] == pytest.approx(initial / steps)
    assert report["learning_rate"]["after_training"] == 0.0


@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.compares("float32", "ROC AUC of 2 and 3 gloo processes against the export evaluated on the host")
def test_eval_counts_each_example_once_across_processes(runs, processes):
    report, _, _ = runs(processes)
    # The classifier's 120 eval texts are not a multiple of 2 x 16 nor of 3 x 16: padded rows are masked out.
    assert report["eval_examples_counted"] == eval_examples(64)
    if TASK != "causal-lm":  # the per-example scores, gathered from every process once: each real row once
        from {{ cookiecutter.project_slug }}.tasks import task

        _, tokenizer, _, examples = task.load_examples(TrainConfig(demo=True, max_seq_length=64), demo=True)
        found = evaluate_on_cpu(task.AUTO_MODEL.from_pretrained(report["exported"]), tokenizer, examples, 64)
        assert report["eval_roc_auc"] == pytest.approx(found["eval_roc_auc"], abs=1e-3)


@pytest.mark.parametrize("processes", [2, 3])
def test_messages_and_progress_bars_appear_once_per_run(runs, processes):
    _, alone, _ = runs(1)
    _, together, _ = runs(processes)
    expected = counts(alone.stdout + alone.stderr)
    assert expected["demo decisions"] == 1 and expected["report tables"] == 1 and expected["epoch bars"] == 2
    assert counts(together.stdout + together.stderr) == expected


# Each step's batch of token ids, as the step received it, rewritten into the record folder after every step.
BATCHES = """
import json
from pathlib import Path
from {{ cookiecutter.project_slug }}.loop import fit
seen, stepped = [], fit.train_step

def seeing(accelerator, parts, batch, *args):
    seen.append(batch["input_ids"].tolist())
    Path(sys.argv[3], "batches.json").write_text(json.dumps(seen))
    return stepped(accelerator, parts, batch, *args)

fit.train_step = seeing
"""


def test_the_seed_orders_the_data_and_each_epoch_is_shuffled_again(tmp_path):
    """--seed: another seed, another order of the same examples (the same seed gives the same batches: the resume
    tests compare whole runs)."""
    orders = {}
    for name, seed in (("first", "42"), ("other", "7")):
        train_in_workers(tmp_path / name, 1, *RUN, "--seed", seed, prelude=BATCHES)
        batches = json.loads((tmp_path / name / "learning-rates" / "batches.json").read_text())
        half = len(batches) // 2  # 2 epochs
        orders[name] = [batches[:half], batches[half:]]

    def rows(epoch):
        return sorted(row for batch in epoch for row in batch)

    first, other = orders["first"], orders["other"]
    assert first[0] != other[0] and rows(first[0]) == rows(other[0])  # another order of the same examples
    assert first[0] != first[1] and rows(first[0]) == rows(first[1])  # each epoch shuffled again


def test_the_main_process_decides_demo_or_hub_for_every_process(tmp_path, monkeypatch):
    """Only the main process finds the hub out of reach: every process still trains the demo."""
    monkeypatch.setenv("TEST_ONLY_MAIN_SEES_NO_HUB", "1")
    report, result, rates = train_in_workers(tmp_path, 2, *NO_DEMO_FLAG)
    assert report["data"] == "demo"
    assert rates[0] == rates[1] and len(rates[1]) == report["learning_rate"]["optimizer_steps"]


# The default demo in several processes reaching the one-process bar: test_chip_count.py.


def hosts(tmp_path, count):
    folders = [tmp_path / f"host-{index}" for index in range(count)]
    for folder in folders:
        folder.mkdir()
    return folders


def test_resume_stops_every_process_when_a_host_cannot_see_the_checkpoint(tmp_path):
    first, second = hosts(tmp_path, 2)
    fp32 = quick("--mixed_precision", "no")
    train_in_workers(tmp_path / "one", 1, *fp32, hosts=[first])
    assert (first / "outputs" / "checkpoints" / "epoch-1" / "progress.json").is_file()

    _, result, rates = train_in_workers(
        tmp_path / "two", 2, *fp32, "--num_epochs", "2", "--resume", "true", hosts=[first, second], check=False
    )
    assert result.returncode != 0
    message = re.search(r"resume: the checkpoint (\S+) is not visible on host (\S+) \(process (\d)\): (.*)", result.stderr)
    assert message, result.stderr[-3000:]
    assert message.group(1) == "outputs/checkpoints/epoch-1" and message.group(3) == "1"
    assert "storage that every host sees" in message.group(4)
    assert rates == {0: [], 1: []}, "a process trained although the run could not resume everywhere"
    assert not (second / "outputs" / "checkpoints" / "LATEST").exists()


def test_a_save_that_another_host_cannot_see_stops_every_process(tmp_path):
    first, second = hosts(tmp_path, 2)
    _, result, rates = train_in_workers(tmp_path, 2, *quick("--mixed_precision", "no"), hosts=[first, second], check=False)
    assert result.returncode != 0
    assert re.search(r"the checkpoint folder \S+ is not visible on host \S+ \(process 1\)", result.stderr), result.stderr[-3000:]
    assert not (first / "outputs" / "checkpoints" / "LATEST").exists()
    assert not list((first / "outputs" / "checkpoints").glob(".epoch-*.partial"))
    assert len(rates[0]) == len(rates[1]) == 96 // 16  # both trained the epoch (the demo's global batch), then stopped


# As tests/test_resume.py's run: 4 steps per epoch per process, so that a signal lands inside an epoch.
SMALL = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--num_epochs", "2",
         "--train_batch_size", "8", "--eval_batch_size", "8", "--mixed_precision", "no"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """SMALL in 2 processes, uninterrupted: (its folder, its report); checkpoints epoch-1 and epoch-2."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    return folder, train_in_workers(folder, 2, *SMALL)[0]


def same_weights(checkpoint: Path, other: Path) -> bool:
    import torch

    found = torch.load(checkpoint / "pytorch_model.bin", weights_only=True)
    expected = torch.load(other / "pytorch_model.bin", weights_only=True)
    return all(torch.equal(found[name], expected[name]) for name in expected)


@pytest.mark.compares("bit for bit", "metrics and weights of 2 gloo processes: stopped by a signal and resumed "
                      "against the uninterrupted run")
def test_sigterm_to_one_process_stops_every_process_at_one_step_and_resume_ends_as_uninterrupted(uninterrupted,
                                                                                                  tmp_path):
    """A preemption notice seen by one process: all agree on the step, one checkpoint, resume is exact."""
    import os
    import signal
    import time

    from conftest import STEP_DOOR, StepDoor, child_env, recorded_rates, start, workers_command

    reference_folder, reference = uninterrupted
    folder = tmp_path / "preempted"
    # Both processes wait after their second step (conftest.STEP_DOOR) while the notice reaches process 1 alone.
    door = StepDoor(tmp_path / "door", 2)
    command, record = workers_command(folder, 2, *SMALL, prelude=STEP_DOOR)
    logs = tmp_path / "driver.stdout", tmp_path / "driver.stderr"
    driver = start(command, child_env(xla=False, **door.env), *logs)
    deadline = time.monotonic() + 600
    while not (door.waiting(0) and door.waiting(1) and (record / "pid-1").is_file()):
        assert driver.poll() is None and time.monotonic() < deadline, logs[1].read_text(errors="replace")[-3000:]
        time.sleep(0.05)
    os.kill(int((record / "pid-1").read_text()), signal.SIGTERM)  # the notice reaches process 1 only
    door.release()
    driver.wait(timeout=600)
    output = "".join(log.read_text(errors="replace") for log in logs)
    assert driver.returncode != 0, output[-3000:]
    assert "preempted (SIGTERM) at epoch 1" in output or "preempted (by another process) at epoch 1" in output, output[-3000:]
    steps = {rank: len(used) for rank, used in recorded_rates(record).items()}
    assert steps == {0: 2, 1: 2}, steps  # both stopped after the step at which process 1 was told
    checkpoints = folder / "outputs" / "checkpoints"
    name = (checkpoints / "LATEST").read_text().strip()
    assert name == f"step-{steps[0]}", name

    resumed, result, _ = train_in_workers(folder, 2, *SMALL, "--resume", "true")
    assert f"resume: continuing after epoch 0, step {steps[0]} of epoch 1" in result.stdout
    for key in (METRIC, "eval_loss", "eval_examples_counted"):
        assert resumed[key] == reference[key], key
    assert same_weights(checkpoints / "epoch-2", reference_folder / "outputs" / "checkpoints" / "epoch-2")


@pytest.mark.compares("bit for bit", "metrics and weights of 2 gloo processes: resumed from the older checkpoint "
                      "against the uninterrupted run")
def test_a_file_damaged_in_one_process_s_share_sends_both_to_the_older_checkpoint(uninterrupted, tmp_path):
    """Each process checks its share of the files; both agree on the checkpoint, and end as the uninterrupted run."""
    import shutil

    reference_folder, reference = uninterrupted
    checkpoints = Path(shutil.copytree(reference_folder / "outputs", tmp_path / "outputs")) / "checkpoints"
    damaged = checkpoints / "epoch-2" / "random_states_1.pkl"
    damaged.write_bytes(damaged.read_bytes()[:-1] + bytes([damaged.read_bytes()[-1] ^ 1]))
    resumed, result, rates = train_in_workers(tmp_path, 2, *SMALL, "--resume", "true")
    assert result.stdout.count(f"resume: checkpoint {checkpoints / 'epoch-2'} is damaged: random_states_1.pkl differs "
                               "from what was written (sha256 mismatch); trying an older one") == 1, result.stdout
    assert f"resume: continuing after epoch 1 from {checkpoints / 'epoch-1'}" in result.stdout
    assert len(rates[0]) == len(rates[1]) == 4  # both trained epoch 2 (4 steps), neither started over
    assert all(resumed[key] == reference[key] for key in (METRIC, "eval_loss", "eval_examples_counted"))
    assert same_weights(checkpoints / "epoch-2", reference_folder / "outputs" / "checkpoints" / "epoch-2")


@pytest.mark.parametrize("processes", [2, 3])
def test_one_metrics_log_per_run_written_by_the_main_process_alone(runs, processes):
    def lines(report):
        text = (Path(report["config"]["output_dir"]) / "metrics.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    alone, together = lines(runs(1)[0]), lines(runs(processes)[0])
    kinds = Counter((line["step"], "eval_loss" in line) for line in together)
    # 12 steps in each run (see above): a log every 3 steps, an evaluation at the end of each of the 2 epochs, and
    # each line once although every process reached each of those points.
    assert sorted(kinds) == [(3, False), (6, False), (6, True), (9, False), (12, False), (12, True)]
    assert set(kinds.values()) == {1} and runs(processes)[0]["logging"]["logs"] == 4
    assert [(line["step"], line.get("learning_rate")) for line in together] == [
        (line["step"], line.get("learning_rate")) for line in alone]  # one schedule, whatever the process count
    assert all(line["loss"] > 0 and line["grad_norm"] > 0 for line in together if "loss" in line)
