"""--streaming: the train split read as a stream, packed on the fly, and resumed at the exact block (data/streaming.py).

Every batch each reader makes is recorded (its number in the run and its input_ids), on the host, before it reaches a
device. A run resumed from the uninterrupted run's step-3 checkpoint must make exactly the uninterrupted run's batches
4 to 6: each reader's stream restored from its JSON position, not skipped through. The train file is the demo's eval
file (fewer blocks than the run takes), so that the stream runs dry and is read again inside the run.
"""

import json
import shutil

import pytest
from conftest import (
    assert_same_weights_and_optimizer_state,
    python_code,
    run,
    spmd_env,
    train,
    train_in_workers,
)

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST

STEPS, SAVED_AT = 6, 3
FILES = ["--train_file", "data/demo-lm/eval.csv", "--eval_file", "data/demo-lm/eval.csv"]
RUN = [*FILES, "--demo", "true", "--streaming", "true", "--max_steps", str(STEPS), "--save_steps", str(SAVED_AT),
       "--keep_checkpoints", "3", "--max_seq_length", "64", "--mixed_precision", "no", "--max_recompilations", "0",
       "--samples", "0", "--export", "false", "--logging_steps", "0"]


def recorder(folder) -> str:
    """Code that records every batch a StreamLoader makes, per reader, into `folder` (before the workers fork)."""
    return f"""
import json, os
from {{ cookiecutter.project_slug }}.data import streaming

def recording_blocks(self, made=streaming.StreamLoader.__iter__):
    number = self.done
    for batch in made(self):
        number += 1
        with open(os.path.join({str(folder)!r}, "blocks-%d.jsonl" % self.shard[0]), "a") as out:
            out.write(json.dumps([number, batch["input_ids"].tolist()]) + "\\n")
        yield batch

streaming.StreamLoader.__iter__ = recording_blocks
"""


def recorded(folder) -> dict:
    """{reader: {batch number: input_ids}}."""
    return {int(path.stem.split("-")[1]): {number: ids for number, ids in map(json.loads, path.read_text().splitlines())}
            for path in folder.glob("blocks-*.jsonl")}


def resume_from(uninterrupted, output) -> None:
    """Give `output` the uninterrupted run's step-3 checkpoint as its newest."""
    checkpoints = output / "checkpoints"
    shutil.copytree(uninterrupted / "checkpoints" / f"step-{SAVED_AT}", checkpoints / f"step-{SAVED_AT}")
    (checkpoints / LATEST).write_text(f"step-{SAVED_AT}")


def assert_resumed_exactly(whole: dict, resumed: dict, readers: int) -> None:
    assert sorted(whole) == sorted(resumed) == list(range(readers))
    for reader in range(readers):
        assert sorted(whole[reader]) == list(range(1, STEPS + 1))
        assert sorted(resumed[reader]) == list(range(SAVED_AT + 1, STEPS + 1)), "the resumed run skipped or re-read"
        for number in range(SAVED_AT + 1, STEPS + 1):
            assert resumed[reader][number] == whole[reader][number], f"reader {reader}, batch {number}"
    if readers > 1:  # each reads its own part
        assert whole[0][1] != whole[1][1]


def test_streaming_without_max_steps_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^max_steps: streaming=True needs it") as refused:
        TrainConfig(streaming=True)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="padding='longest'"):
        TrainConfig(streaming=True, max_steps=3, padding="longest")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")  # once: the fsdp bake's stream test below trains a stream too
def test_streaming_trains_with_two_graphs_and_no_recompilation(tmp_path):
    report, _ = train(tmp_path, *RUN, "--checkpoint", "false")
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    assert report["train_examples"] == "streaming" and report["train_padding_fraction"] == 0.0
    assert report["learning_rate"]["optimizer_steps"] == STEPS


@pytest.mark.workers
@pytest.mark.layout("data")
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "weights and optimizer state of 2 gloo processes streaming: resumed against the "
                      "uninterrupted run")
def test_two_processes_resume_their_streams_at_the_exact_block(tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    for folder in (whole, resumed):
        (folder / "blocks").mkdir(parents=True)
    train_in_workers(whole, 2, *RUN, prelude=recorder(whole / "blocks"))
    resume_from(whole / "outputs", resumed / "outputs")
    _, result, _ = train_in_workers(resumed, 2, *RUN, "--resume", "true", prelude=recorder(resumed / "blocks"))
    assert f"step {SAVED_AT} of epoch 1" in result.stdout
    assert_resumed_exactly(recorded(whole / "blocks"), recorded(resumed / "blocks"), readers=2)
    # The stream ran dry and was read again (its next pass) after the resume point, in both runs alike.
    for process in (0, 1):
        state = json.loads((whole / "outputs" / "checkpoints" / "epoch-1" / f"stream-{process}.json").read_text())
        assert state["pass"] >= 1 and state["batches"] == STEPS
    assert_same_weights_and_optimizer_state(resumed / "outputs" / "checkpoints" / "epoch-1",
                                            whole / "outputs" / "checkpoints" / "epoch-1")


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "eval loss on 4 SPMD devices streaming: resumed against the uninterrupted run")
def test_fsdp_on_four_devices_resumes_its_stream_at_the_exact_block(tmp_path):
    args = [*RUN, "--parallelism", "fsdp", "--train_batch_size", "2"]
    main = "\nimport sys\nfrom {{ cookiecutter.project_slug }}.cli import main\nmain(sys.argv[1:])\n"
    reports = {}
    for name in ("whole", "resumed"):
        folder = tmp_path / name
        (folder / "blocks").mkdir(parents=True)
        if name == "resumed":
            resume_from(tmp_path / "whole" / "outputs", folder / "outputs")
        extra = ["--resume", "true"] if name == "resumed" else []
        run(python_code(recorder(folder / "blocks") + main, "--output_dir", str(folder / "outputs"), *args, *extra),
            env=spmd_env(4))
        reports[name] = json.loads((folder / "outputs" / "report.json").read_text())
    assert_resumed_exactly(recorded(tmp_path / "whole" / "blocks"), recorded(tmp_path / "resumed" / "blocks"), readers=1)
    assert reports["whole"]["layout"]["devices"] == 4
    assert reports["resumed"]["eval_loss"] == reports["whole"]["eval_loss"]
