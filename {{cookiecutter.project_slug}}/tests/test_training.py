"""The training function on an XLA CPU device and on a plain CPU: report, compilations, counting."""

import pytest
from conftest import QUICK

pytestmark = pytest.mark.xla

REPORT_FIELDS = (
    "device", "distributed_type", "num_processes", "epochs", "train_examples", "examples_per_second",
    "eval_accuracy", "eval_examples_counted", "xla_compilations", "compile_seconds", "precision",
)
EVAL_SET_SIZE = 120  # data/demo/eval.csv
MAX_COMPILATIONS = 5


def quick(*extra):
    args = list(QUICK)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


@pytest.mark.parametrize("epochs", ["1", "2", "3"])
def test_compilations_do_not_grow_with_epochs(run_training, epochs):
    report, _ = run_training(*quick("--num_epochs", epochs, "--mixed_precision", "no"))
    for field in REPORT_FIELDS:
        assert field in report, field
    assert report["device"] == "xla:CPU"
    assert report["distributed_type"] == "XLA"
    assert report["num_processes"] == 1
    assert report["epochs"] == int(epochs)
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    assert 0.0 <= report["eval_accuracy"] <= 1.0
    assert report["examples_per_second"] > 0
    assert report["compile_seconds"] > 0
    # Two train graphs (before and after the optimizer has state) and one eval graph.
    assert 1 <= report["xla_compilations"] <= MAX_COMPILATIONS


@pytest.mark.parametrize(
    ("train_bs", "eval_bs", "extra_graphs"),
    [("16", "16", 0), ("16", "24", 1), ("8", "7", 1)],
    ids=["same-size-ragged-last", "larger-divides", "smaller-ragged-last"],
)
def test_every_eval_example_counted_once(run_training, train_bs, eval_bs, extra_graphs):
    report, result = run_training(
        *quick("--train_batch_size", train_bs, "--eval_batch_size", eval_bs, "--mixed_precision", "no")
    )
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    assert report["xla_compilations"] <= MAX_COMPILATIONS + extra_graphs
    warned = "differs from train_batch_size" in result.stdout
    assert warned == (train_bs != eval_bs)


def test_dynamic_padding_recompiles(run_training):
    """The counter is real: the loop pattern this project avoids shows up in it."""
    report, _ = run_training(*quick("--padding", "dynamic", "--mixed_precision", "no"))
    assert report["xla_compilations"] > MAX_COMPILATIONS


def test_offline_demo_learns(run_training):
    """The default demo (baked epochs and sequence length) reaches the promised accuracy."""
    report, result = run_training("--mixed_precision", "no")
    assert "offline demo" in result.stdout
    assert report["data"] == "demo"
    assert report["train_examples"] == 480
    assert report["eval_accuracy"] >= 0.9
    assert report["xla_compilations"] <= MAX_COMPILATIONS


@pytest.mark.parametrize("level", ["no", "bf16"])
def test_plain_cpu_without_torch_xla(run_training, level):
    report, _ = run_training(*quick("--mixed_precision", level), xla=False)
    assert report["device"] == "cpu"
    assert report["distributed_type"] == "NO"
    assert report["xla_compilations"] is None
    assert report["compile_seconds"] is None
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    if level == "bf16":
        assert report["precision"]["via"] == "torch.autocast(cpu, bfloat16)"
