"""--logging_steps: each log holds its steps' numbers, reading them adds no graph and only its own transfers, and the
numbers reach metrics.jsonl, TensorBoard's event files and the run's picture.

In the project's layout and task: the step that is logged is each layout's and each task's own.
"""

import json
import math

import pytest
from conftest import child_env, quick, train, train_recording_losses

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.launch.environment import EnvironmentProblem, check_tracker

RUN = quick("--num_epochs", "2", "--checkpoint", "false", "--export", "false")
# A loss in a log is a sum of fixed-point values (units of 2**-24) divided by its steps.
FIXED_POINT = 2.0**-24


def trained(folder, *args):
    """(report, metrics.jsonl's records, the steps' [loss, norm]) of a run of RUN with these flags added."""
    report, _, losses = train_recording_losses(folder, *RUN, *args)
    norms = json.loads((folder / "losses.json.norms").read_text())
    lines = (folder / "outputs" / "metrics.jsonl").read_text().splitlines()
    return report, [json.loads(line) for line in lines], [list(pair) for pair in zip(losses, norms, strict=True)]


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("every-step"), "--logging_steps", "1")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "every step's loss and norm, and the eval loss, of the bf16 default: a log "
                      "every step against no logs (the same graphs)")
def test_every_log_holds_its_steps_loss_norm_and_rate_and_adds_only_its_own_reads(logged, tmp_path):
    report, records, steps = logged
    logs = [record for record in records if "learning_rate" in record]
    assert [log["step"] for log in logs] == list(range(1, len(steps) + 1)) and report["logging"]["logs"] == len(steps)
    for log, (loss, norm) in zip(logs, steps, strict=True):
        assert abs(log["loss"] - loss) <= FIXED_POINT, (log, loss)  # one step's window: that step's loss
        assert log["grad_norm"] == norm  # the very tensor the clip computed, read on the log's thread
        assert log["examples_per_second_per_chip"] > 0 and log["tokens_per_second_per_chip"] > 0
    rates = report["learning_rate"]
    assert (logs[0]["learning_rate"], logs[-1]["learning_rate"]) == (rates["first_step"], rates["last_step"])
    assert logs[0]["learning_rate"] > logs[-1]["learning_rate"] > 0  # the linear decay, step by step
    # One line per evaluation, at the end of each epoch, with the report's numbers.
    evaluations = [record for record in records if "eval_loss" in record]
    assert [(e["step"], e["eval_loss"]) for e in evaluations] == [
        (e["global_step"], e["eval_loss"]) for e in report["evaluations"]]

    # Against the same run without logs: the same graphs and results, and two transfers more per log, no other.
    off, off_records, off_steps = trained(tmp_path, "--logging_steps", "0")
    assert [record for record in off_records if "learning_rate" in record] == []
    assert report["xla_compilations"] == off["xla_compilations"] and report["recompilations"] == 0
    assert [graph["phase"] for graph in report["graphs"]["graphs"]] == [
        graph["phase"] for graph in off["graphs"]["graphs"]]
    assert report["device_to_host_transfers"] == off["device_to_host_transfers"] + 2 * len(logs)
    assert steps == off_steps and report["eval_loss"] == off["eval_loss"]
    # The model FLOPs the steady steps came to (watch/flops.py); no MFU on the CPU, and the report says why.
    flops = report["flops"]
    assert flops["model_flops_per_token"] > 0 and flops["achieved_flops_per_second_per_chip"] > 0
    assert flops["why_no_mfu"] == "no bf16 peak known for xla:CPU: MFU is a TPU's figure"


@pytest.mark.xla
@pytest.mark.slow
def test_tensorboard_holds_every_logged_step_and_the_picture_is_drawn(logged, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    report, records, _ = logged
    output = report["config"]["output_dir"]
    events = EventAccumulator(f"{output}/tensorboard")
    events.Reload()
    logs = [record for record in records if "learning_rate" in record]
    evaluations = [record for record in records if "eval_loss" in record]
    for tag, key, expected in (("train/loss", "loss", logs), ("train/learning_rate", "learning_rate", logs),
                               ("train/grad_norm", "grad_norm", logs), ("eval/loss", "eval_loss", evaluations)):
        scalars = events.Scalars(tag)
        assert [scalar.step for scalar in scalars] == [record["step"] for record in expected], tag
        for scalar, record in zip(scalars, expected, strict=True):  # stored as float32
            assert math.isclose(scalar.value, record[key], rel_tol=1e-6), (tag, scalar, record)
    picture = report["curves"]
    assert picture == f"{output}/curves.png"
    with open(picture, "rb") as image:
        assert image.read(8) == b"\x89PNG\r\n\x1a\n"


def wandb_history(run_file) -> dict:
    """{step: that step's values} in a wandb offline run's file. wandb 0.31 reads it back only in its Go core: the file
    is LevelDB's log format (32 KiB blocks of records, each behind a 7-byte header: checksum, length, kind) holding
    wandb's Record protobufs, of which the history records are the logged rows."""
    from wandb.proto import wandb_internal_pb2

    data, block, offset, pending, rows = run_file.read_bytes(), 32768, 7, b"", {}  # the file's own header: 7 bytes
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header is padding
            offset += block - offset % block
            continue
        length, kind = int.from_bytes(data[offset + 4:offset + 6], "little"), data[offset + 6]
        pending += data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                rows[row["_step"]] = row
    return rows


def trackio_history(folder, project: str) -> dict:
    """{step: that step's values} in trackio's local database (TRACKIO_DIR/<project>.db, SQLite)."""
    import sqlite3

    with sqlite3.connect(folder / f"{project}.db") as database:
        rows = database.execute("SELECT step, metrics FROM metrics ORDER BY id").fetchall()
    history = {}
    for step, metrics in rows:
        history.setdefault(step, {}).update(json.loads(metrics))
    return history


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_wandb_and_trackio_runs_offline_hold_every_logged_step(tracker, tmp_path):
    pytest.importorskip(tracker, reason=f"{tracker} is not installed here (`pip install {tracker}` runs this test)")
    local = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true", "TRACKIO_DIR": str(tmp_path)}
    report, _ = train(tmp_path, *RUN, "--num_epochs", "1", "--logging_steps", "2", "--report_to", tracker,
                      env=child_env(**local))
    records = [json.loads(line) for line in (tmp_path / "outputs" / "metrics.jsonl").read_text().splitlines()]
    project = "{{ cookiecutter.project_slug }}"  # the run's project: the package's name
    if tracker == "wandb":
        (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
        history = wandb_history(run_file)
    else:
        history = trackio_history(tmp_path, project)
    assert report["logging"]["logs"] == report["learning_rate"]["optimizer_steps"] // 2 > 0
    assert sorted(history) == sorted({record["step"] for record in records})
    for record in records:  # a log's and an evaluation's numbers, under train/ and eval/
        for key, value in record.items():
            if key not in ("step", "epoch"):
                name = f"eval/{key.removeprefix('eval_')}" if key.startswith("eval_") else f"train/{key}"
                if isinstance(value, list):  # a classifier's confusion matrix: metrics.jsonl's, a tracker's scalars not
                    assert name not in history[record["step"]], (tracker, key)
                    continue
                assert history[record["step"]][name] == value, (tracker, record, key)


def test_a_log_reads_only_what_was_dispatched_on_its_own_thread_in_order():
    import threading

    import torch

    from {{ cookiecutter.project_slug }}.watch.metrics_log import HostReads

    reads, seen = HostReads(), []
    original = torch.Tensor.cpu

    def recording(tensor):
        seen.append(threading.current_thread().name)
        return original(tensor)

    torch.Tensor.cpu = recording
    try:
        for index in range(5):
            reads.ask(index, [torch.tensor([index, index * 2])])
        finished = reads.finish()
    finally:
        torch.Tensor.cpu = original
    assert [(key, values[0].tolist()) for key, values in finished] == [(index, [index, index * 2]) for index in range(5)]
    assert set(seen) == {"metrics-reads"}  # never the loop's thread


@pytest.mark.parametrize(("options", "refusal"), [
    ({"logging_steps": -1}, "logging_steps=-1: must be 0 (no logs) or a positive whole number"),
    ({"logging_steps": 2.5}, "logging_steps=2.5: must be 0 (no logs) or a positive whole number"),
    ({"report_to": "comet"}, "report_to='comet': must be one of tensorboard, wandb, trackio, none"),
])
def test_bad_logging_options_are_refused_in_one_line(options, refusal):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(**options)
    assert str(refused.value) == refusal


def test_a_tracker_that_is_not_installed_is_named_before_training(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(EnvironmentProblem) as refused:
        check_tracker("wandb")
    assert str(refused.value) == "report_to='wandb': wandb is not installed here: `pip install wandb`, or --report_to none"
    check_tracker("tensorboard")  # a dependency of the project
    check_tracker("none")


def tiny_llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def test_model_flops_per_token_follow_palms_formula():
    from {{ cookiecutter.project_slug }}.watch.flops import model_flops_per_token

    attention = 12 * 2 * 2 * 8 * 16  # 12 x layers x heads x head size x the 16-token length
    untied = tiny_llama(tied=False)
    everything = sum(parameter.numel() for parameter in untied.parameters())
    assert model_flops_per_token(untied, 16) == 6 * (everything - 64 * 16) + attention  # the input table is looked up
    tied = tiny_llama(tied=True)  # the one table is also the output layer: multiplied, counted once
    assert model_flops_per_token(tied, 16) == 6 * sum(parameter.numel() for parameter in tied.parameters()) + attention
    # Frozen weights get no gradient of their own: 4 FLOPs each, not 6 (LoRA's frozen base).
    untied.requires_grad_(False)
    untied.lm_head.requires_grad_(True)
    head = 64 * 16
    assert model_flops_per_token(untied, 16) == 6 * head + 4 * (everything - 64 * 16 - head) + attention


def test_mfu_is_given_for_a_known_tpu_and_said_why_not_elsewhere(monkeypatch):
    from {{ cookiecutter.project_slug }}.watch.flops import model_flops_per_token, utilisation

    model = tiny_llama(tied=False)
    per_token = model_flops_per_token(model, 16)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5litepod-8")
    found = utilisation(model, 16, 100.0, chips=8, device="xla:TPU")
    assert found["achieved_flops_per_second_per_chip"] == per_token * 16 * 100.0 / 8
    assert (found["chip"], found["mfu"]) == ("v5e", found["achieved_flops_per_second_per_chip"] / 197e12)
    cpu = utilisation(model, 16, 100.0, chips=1, device="xla:CPU")
    assert "mfu" not in cpu and cpu["why_no_mfu"] == "no bf16 peak known for xla:CPU: MFU is a TPU's figure"
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v99-8")
    assert utilisation(model, 16, 100.0, chips=8, device="xla:TPU")["why_no_mfu"] == "no bf16 peak known for xla:TPU (v99-8)"
    assert "mfu" not in utilisation(model, None, 100.0, chips=1, device="xla:TPU")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "eval loss of the bf16 default: two steps traced by the profiler against the "
                      "run untraced (the same graphs)")
def test_profile_steps_trace_those_steps_and_compile_nothing_more(logged, tmp_path):
    import gzip

    report, _, _ = trained(tmp_path, "--logging_steps", "1", "--profile_steps", "3-4")
    profile = report["profile"]
    assert profile["steps"] == [3, 4] and profile["traced_steps"] == [3, 4]
    (trace_file,) = profile["trace_files"]  # TensorBoard's profile plugin reads plugins/profile/<time>/<host>.xplane.pb
    (events,) = list((tmp_path / "outputs" / "profile").rglob("*.trace.json.gz"))
    marked = [event for event in json.load(gzip.open(events))["traceEvents"] if event.get("name") == "train_step"]
    assert sorted(int(event["args"]["step_num"]) for event in marked) == [3, 4]  # each traced step, marked
    # Tracing only watches: the same graphs and results as the same run untraced.
    assert report["xla_compilations"] == logged[0]["xla_compilations"] and report["recompilations"] == 0
    assert report["eval_loss"] == logged[0]["eval_loss"]


@pytest.mark.parametrize("given", ["0-2", "3-2", "a-b", "2-", "-3"])
def test_bad_profile_steps_are_refused_in_one_line(given):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(profile_steps=given)
    assert str(refused.value) == (f"profile_steps={given!r}: must be A-B, the first and last optimizer step to trace "
                                  "(1 <= A <= B), or A alone")
    from {{ cookiecutter.project_slug }}.watch.step_profile import step_range

    assert step_range(TrainConfig(profile_steps="5").profile_steps) == (5, 5)
    assert step_range(TrainConfig(profile_steps="2-7").profile_steps) == (2, 7)
