"""The training function on an XLA CPU device and on a plain CPU: report, compilations, counting."""

import pytest
from conftest import quick

# What a run reports and how its demo learns does not depend on the layout: tested in a data-layout project (the fsdp
# layout's own graphs, epochs and demo are test_fsdp.py's and test_chip_count.py's).
pytestmark = [pytest.mark.xla, pytest.mark.slow, pytest.mark.layout("data")]

REPORT_FIELDS = (
    "device", "distributed_type", "num_processes", "epochs", "train_examples", "steady_examples_per_second",
    "eval_accuracy", "eval_examples_counted", "xla_compilations", "compile_seconds", "precision",
)
EVAL_SET_SIZE = 120  # data/demo/eval.csv


def test_compilations_do_not_grow_with_epochs(run_training):
    """One three-epoch run: epochs 2 and 3 compile nothing that epoch 1 did not."""
    report, _ = run_training(*quick("--num_epochs", "3", "--mixed_precision", "no"))
    for field in REPORT_FIELDS:
        assert field in report, field
    assert report["device"] == "xla:CPU"
    assert report["distributed_type"] == "XLA"
    assert report["num_processes"] == 1
    assert report["epochs"] == 3
    # 16 per batch over 120 examples: the last eval batch is padded with masked rows.
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    assert 0.0 <= report["eval_accuracy"] <= 1.0
    # Speeds are reported (compared in the benchmarks, never here: a loaded machine would decide such a test).
    assert report["examples_per_second_with_compilation"] > 0 and report["steady_examples_per_second"] > 0
    assert report["steady_step_seconds"] > 0
    traced = report["host_tracing_seconds_per_step"]  # the lazy step's phases, each marked (watch/host_tracing.py)
    assert traced["step"] >= traced["forward"] + traced["backward"] + traced["optimizer"] - 1e-6 > 0
    assert traced["steady_steps"] == report["learning_rate"]["optimizer_steps"] - 2
    assert report["host_share_of_step"]["share"] is None and "XLA:CPU" in report["host_share_of_step"]["says"]
    assert report["compile_seconds"] > 0
    after_epoch_1, after_epoch_2, after_epoch_3 = report["process_compilations_after_each_epoch"]
    assert after_epoch_1 == after_epoch_2 == after_epoch_3
    # One train graph and one eval graph, as the README promises, whatever the number of epochs.
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0


def test_offline_demo_learns(demo_report):
    """The default demo (baked epochs and sequence length, no flags) reaches the promised accuracy."""
    report, result = demo_report("fp32")
    assert "offline demo" in result.stdout
    assert report["data"] == "demo"
    assert report["train_examples"] == 480
    assert report["eval_accuracy"] >= 0.9
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0


@pytest.mark.parametrize("level", ["no", "bf16"])
def test_plain_cpu_without_torch_xla(run_training, level):
    report, _ = run_training(*quick("--mixed_precision", level), xla=False)
    assert report["device"] == "cpu"
    assert report["distributed_type"] == "NO"
    assert report["xla_compilations"] is None
    assert report["compile_seconds"] is None
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    # Off XLA, bf16 is torch.autocast on the CPU, as on XLA.
    assert report["precision"]["autocast"] is (level == "bf16")
    if level == "bf16":
        assert report["precision"]["via"] == "torch.autocast(cpu, bfloat16) around the forward"
