"""Gradient accumulation (--gradient_accumulation_steps): N micro-batches per optimizer step train as one batch of all
of them would, on one device, on four sharded ones (FSDPv2) and in two processes, in two graphs more than a run
without it (one for N = 2), each micro-batch run on its own so that the device holds one micro-batch's activations.

The runs train without dropout (the same masks cannot be drawn for one batch and for its parts) in float32, and
compare the exported weights. Resuming inside an accumulating run is test_resume.py's: its runs accumulate 2
micro-batches per step. The training tests are the loop's machinery (tests/conftest.py).
"""

import json
import os
import re

import pytest
import torch
from comparing import float32_apart
from conftest import NORMS, QUICK, child_env, python_code, run, spmd_env, train_in_workers
from safetensors.torch import load_file

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig

{% if cookiecutter.task == "causal-lm" -%}
NO_DROPOUT = ""  # the demo's tiny Llama has none
{%- else -%}
NO_DROPOUT = ("from {{ cookiecutter.project_slug }}.tasks import text_classification as demo; "
              "demo.DEMO_SHAPE.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0); ")
{%- endif %}
# A run of the command line without dropout that records the global norm of every step's gradients (conftest.NORMS).
TRAIN = NO_DROPOUT + NORMS
# 96 examples: 6 optimizer steps of 16 at the demo's rate (1e-3), which moves the weights by up to about 6e-3.
# The lazy step: accumulation is its own (the JAX step refuses it, and auto takes the lazy one), and clip_gradients is
# where NORMS reads the norms (the JAX step clips inside its function).
RUN = [*QUICK, "--mixed_precision", "no", "--checkpoint", "false", "--step_function", "lazy"]
ONE_BATCH = ["--train_batch_size", "16"]
# Two programs in float32 (accumulated, sharded or in processes, against one batch): within float32's bound for
# the 6 steps (tests/comparing.py), the weights' largest difference (they are about 1 at most) and the norms relative.
TOLERANCE = float32_apart(6)


def trained(folder, *args, xla: bool = True, env=None) -> tuple[dict, list[float], dict]:
    """(exported weights, the gradients' norm at each step, report) of a run without dropout."""
    folder.mkdir(parents=True)
    record, output = folder / "norms.json", folder / "outputs"
    run(python_code(TRAIN, str(record), "--output_dir", str(output), *RUN, *args, xla=xla), env=env or child_env(xla))
    weights = load_file(output / "model" / "model.safetensors")
    return weights, json.loads(record.read_text()), json.loads((output / "report.json").read_text())


def dumping(folder) -> dict:
    """An XLA run's environment that writes every compiled graph's buffer assignment into `folder`."""
    return child_env(XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={folder}")


def largest_graph_bytes(folder) -> int:
    """The device memory of the run's largest graph, as XLA's buffer assignment counts it (arguments included)."""
    used = re.compile(r"Total bytes used: (\d+)")
    return max(int(used.search(path.read_text())[1]) for path in folder.glob("*buffer-assignment.txt"))


def largest_difference(weights, other) -> float:
    assert weights.keys() == other.keys()
    return max((weights[name] - other[name]).abs().max().item() for name in weights)


def initial_weights() -> dict:
    """The demo model as every run builds it (seeded), before training."""
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(demo=True, max_seq_length=64)
    return task.build_model(config, demo=True, vocab_size=len(load_tokenizer(config.data, config.model, demo=True))).state_dict()


@pytest.mark.slow
@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.compares("float32", "weights and gradient norms of 6 steps: 4 micro-batches of 4 on one device, 4 "
                      "sharded devices, against one batch of 16")
def test_four_micro_batches_of_four_train_as_one_batch_of_16_on_one_device_and_on_four_sharded_ones(tmp_path):
    one_batch, norms, report = trained(tmp_path / "one-batch", *ONE_BATCH, env=dumping(tmp_path / "one-batch-graphs"))
    accumulated, accumulated_norms, accumulating = trained(tmp_path / "accumulated", "--train_batch_size", "4",
                                                           "--gradient_accumulation_steps", "4",
                                                           env=dumping(tmp_path / "accumulated-graphs"))
    sharded, sharded_norms, fsdp = trained(tmp_path / "fsdp", "--parallelism", "fsdp", "--train_batch_size", "1",
                                           "--gradient_accumulation_steps", "4", env=spmd_env(4))
    # Not a test that passes because nothing moved: training moved the weights many times the tolerance.
    start = initial_weights()
    assert largest_difference(one_batch, {name: start[name] for name in one_batch}) > 10 * TOLERANCE
    assert largest_difference(accumulated, one_batch) < TOLERANCE
    assert largest_difference(sharded, one_batch) < TOLERANCE
    # The gradients are those of the mean loss, not of the sum of the micro-batches' (AdamW alone would hardly tell).
    assert len(norms) == 6 and accumulated_norms == pytest.approx(norms, rel=TOLERANCE)
    assert sharded_norms == pytest.approx(norms, rel=TOLERANCE)
    # What accumulation is for: the device holds one micro-batch's activations at a time, not the whole batch's
    # (XLA's CPU compiler: 9.8 MiB against 33.1 at 128 tokens; 4.1 against 11.0 at the 64 here).
    one_batch_bytes = largest_graph_bytes(tmp_path / "one-batch-graphs")
    assert largest_graph_bytes(tmp_path / "accumulated-graphs") < 0.6 * one_batch_bytes
    for run_report, per_chip in ((accumulating, 4), (fsdp, 1)):
        assert run_report["train_batch"] == {"per_chip": per_chip, "accumulation_steps": 4, "global": 16}
        assert run_report["learning_rate"]["optimizer_steps"] == report["learning_rate"]["optimizer_steps"] == 6
        # Two graphs more than the demo's 2: the first micro-batch's and the middle ones' (the last one's runs with the
        # update, in the graph of a step without accumulation: loop/step.py); none after warm-up.
        assert report["xla_compilations"] == 2 and run_report["xla_compilations"] == 4
        assert run_report["recompilations"] == 0


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.workers
@pytest.mark.compares("float32", "weights and gradient norms of 6 steps: 2 gloo processes accumulating against one "
                      "process with one batch of 16")
def test_two_processes_accumulating_four_micro_batches_of_two_train_as_one_process_with_one_batch_of_16(tmp_path):
    """Without torch_xla (gloo workers): DDP reduces the gradients once per step, in the last micro-batch's backward."""
    one_batch, norms, _ = trained(tmp_path / "one-process", *ONE_BATCH, "--parallelism", "data", xla=False)
    report, _, _ = train_in_workers(tmp_path / "two", 2, *RUN, "--train_batch_size", "2",
                                    "--gradient_accumulation_steps", "4", prelude=NO_DROPOUT)
    two = load_file(tmp_path / "two" / "outputs" / "model" / "model.safetensors")
    assert report["train_batch"] == {"per_chip": 2, "accumulation_steps": 4, "global": 16}
    assert largest_difference(two, one_batch) < TOLERANCE
    for rank in (0, 1):
        recorded = json.loads((tmp_path / "two" / "learning-rates" / f"norms-{rank}.json").read_text())
        assert len(norms) == 6 and recorded == pytest.approx(norms, rel=TOLERANCE)


def test_the_demo_keeps_its_global_batch_of_16_when_accumulating():
    config = TrainConfig(demo=True, gradient_accumulation_steps=4)
    assert config.per_chip_train_batch(demo=True, replicas=2) * 2 * 4 == 16
    assert TrainConfig(train_batch_size=8, gradient_accumulation_steps=4).per_chip_train_batch(False, 2) == 8


def test_micro_batches_are_strided_rows_so_each_stays_spread_over_the_chips():
    from {{ cookiecutter.project_slug }}.data.batching import micro_batch

    batch = {"input_ids": torch.arange(16).reshape(8, 2), "labels": torch.arange(8)}
    parts = [micro_batch(batch, 4, torch.tensor([index])) for index in range(4)]
    assert [part["labels"].tolist() for part in parts] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert parts[1]["input_ids"].tolist() == [[2, 3], [10, 11]]


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_an_accumulation_below_1_or_not_whole_is_one_line(value):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(gradient_accumulation_steps=value)
    assert str(refused.value) == f"gradient_accumulation_steps={value!r}: must be a positive whole number"
