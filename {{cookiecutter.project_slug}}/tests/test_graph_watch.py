"""The recompilation watch: every graph listed with its phase, recompilations explained, and a limit that stops.

Runs on the XLA CPU device, where graphs, compilations and torch_xla's own analysis are real.
"""

import re
import socket

import pytest
from conftest import eval_examples, python_code, quick, run, train

from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST
from {{ cookiecutter.project_slug }}.watch.compile_analysis import HOST_READ, parse_analyses

pytestmark = [pytest.mark.xla, pytest.mark.machinery]

DYNAMIC_FIX = "padding='dynamic' pads to the longest row: use padding='fixed'"


def graphs_of(report, phase=None):
    return [graph for graph in report["graphs"]["graphs"] if phase in (None, graph["phase"])]


@pytest.mark.slow
def test_default_demo_compiles_only_warm_up_graphs_each_named(demo_report):
    """The default demo (baked epochs), stopped by any recompilation: every graph is warm-up, with its phase."""
    report, _ = demo_report("fp32")
    watched = report["graphs"]
    assert report["recompilations"] == watched["recompilations"] == 0
    assert watched["compiled"] == watched["warmup"] == report["xla_compilations"]  # every graph of the run
    assert {graph["phase"] for graph in watched["graphs"]} == {"train", "eval"}
    for graph in watched["graphs"]:
        assert graph["warmup"] and graph["epoch"] == 1 and graph["step"] >= 1, graph
        assert graph["batch_shapes"]["input_ids"][1] == report["config"]["max_seq_length"]
        assert graph["compile_seconds"] > 0 and graph["cause"], graph
    assert max(graph["step"] for graph in graphs_of(report, "train")) <= 3  # the training warm-up
    # Exactly 2: the step (the optimizer's state exists before the first one: loop/adamw.py) and the evaluation
    # step. No graph for a host read of the attention mask (modeling.ATTENTION builds it in the graph).
    assert [graph["phase"] for graph in watched["graphs"]] == ["train", "eval"]
    # The loss sum and the eval counts, per epoch; the loss sums and the gradient norm, per log (--logging_steps).
    assert report["logging"]["logs"] > 0
    assert report["device_to_host_transfers"] == 2 * report["epochs"] + 2 * report["logging"]["logs"]


@pytest.mark.slow
def test_dynamic_padding_recompiles_and_says_why_once(tmp_path):
    report, result = train(tmp_path, *quick("--padding", "dynamic", "--num_epochs", "2", "--max_recompilations", "1000"))
    recompiled = [graph for graph in graphs_of(report) if not graph["warmup"]]
    assert report["recompilations"] == len(recompiled) > 0
    assert {graph["phase"] for graph in recompiled} == {"train"}  # eval sees the same shapes every time
    lines = [line for line in result.stdout.splitlines() if line.startswith("recompilation: ")]
    assert len(lines) == 1, lines  # once per cause, not once per step
    found = re.fullmatch(r"recompilation: epoch 1 train step (\d+): new train graph \(\d+ recompilation\(s\) so far\): "
                         r"batch shape \(16, (\d+)\) after \(16, (\d+)\); (.*)", lines[0])
    assert found and found.group(4) == DYNAMIC_FIX, lines[0]
    first = recompiled[0]
    assert (first["step"], first["batch_shapes"]["input_ids"][1]) == (int(found.group(1)), int(found.group(2)))


@pytest.mark.slow
def test_the_limit_stops_the_run_at_the_first_recompilation(tmp_path):
    report, result = train(tmp_path, *quick("--padding", "dynamic", "--num_epochs", "2"), check=False)
    assert result.returncode == 2
    assert report is None
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].endswith(f"{DYNAMIC_FIX} (stopped: --max_recompilations 0)"), errors
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def watched_float32(tmp_path_factory):
    """The quick demo in float32 for 2 epochs, watched (the default): (report, process), shared by two tests."""
    return train(tmp_path_factory.mktemp("watch-on"), *quick("--mixed_precision", "no", "--num_epochs", "2"))


@pytest.mark.slow
def test_an_eval_batch_size_unlike_the_train_size_compiles_its_eval_graph_in_warm_up(watched_float32, run_training):
    same, _ = watched_float32
    other, _ = run_training(*quick("--eval_batch_size", "24", "--mixed_precision", "no"))
    assert same["recompilations"] == other["recompilations"] == 0
    # Evaluation has its own graph at any size: another size costs no extra graph.
    assert len(graphs_of(other, "eval")) == len(graphs_of(same, "eval")) == 1
    assert other["eval_examples_counted"] == same["eval_examples_counted"] == eval_examples(64)
    assert all(graph["warmup"] for graph in graphs_of(other, "eval"))
    assert {tuple(graph["batch_shapes"]["input_ids"]) for graph in graphs_of(other, "eval")} == {(24, 64)}


# A host read slipped into the training step from the second epoch on: the classic hidden recompilation.
HOST_READ_IN_THE_STEP = """
import runpy, sys
from {{ cookiecutter.project_slug }}.loop import fit

original, steps = fit.train_step, []

def step_with_a_host_read(*args):
    steps.append(1)
    loss = original(*args)
    if len(steps) > 6:  # epoch 2 of 6 steps each
        print_the_loss = float(loss.loss)
    return loss

fit.train_step = step_with_a_host_read
sys.argv = ["cli", *sys.argv[1:]]
runpy.run_module("{{ cookiecutter.project_slug }}.cli", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_a_host_read_is_named_by_its_cause_and_frame_and_the_checkpoint_is_kept(tmp_path):
    output = tmp_path / "outputs"
    result = run(python_code(HOST_READ_IN_THE_STEP, "--output_dir", str(output), *quick("--num_epochs", "2")), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith("error: epoch 2 train step 1: new train graph"), error
    assert "a tensor read on the host before the step's sync at step_with_a_host_read (<string>:" in error
    assert error.endswith("keep values on the device and read them once, after the loop (stopped: --max_recompilations 0)")
    # Stopped in epoch 2: epoch 1's checkpoint is the one to resume.
    assert (output / "checkpoints" / LATEST).read_text().strip() == "epoch-1"
    # One file per host and process (hosts of a pod share output_dir).
    log = (output / "xla-compilations" / f"compilations-{socket.gethostname()}-process-0.log").read_text()
    assert HOST_READ in [analysis.cause for analysis in parse_analyses(log)[-2:]]


@pytest.mark.slow
@pytest.mark.compares("bit for bit", "eval loss with the compilation watch against without (the same graphs)")
def test_the_watch_adds_no_graph_and_no_transfer(tmp_path, watched_float32):
    on, _ = watched_float32
    off, _ = train(tmp_path / "off", *quick("--mixed_precision", "no", "--num_epochs", "2", "--watch_compilations", "false"))
    assert off["graphs"] is None and on["graphs"]["compiled"] == on["xla_compilations"]
    assert on["xla_compilations"] == off["xla_compilations"]
    assert on["device_to_host_transfers"] == off["device_to_host_transfers"]
    assert on["eval_loss"] == off["eval_loss"]


def test_analysis_blocks_are_read_with_the_users_frame():
    (host_read, synced) = parse_analyses(SAMPLE)
    assert host_read.cause == HOST_READ
    assert host_read.frame == "log_metrics (/home/me/project/train_extra.py:12)"
    assert (synced.cause, synced.frame) == ("user torch_xla.sync", "_train_epoch (/home/me/project/pkg/training.py:225)")


SAMPLE = """
Compilation Analysis: ================================================================================
Compilation Analysis: Compilation Cause
Compilation Analysis:   most likely user code trying to access tensor value before torch_xla.sync
Compilation Analysis: Graph Info:
Compilation Analysis:   Graph Hash: 8ff067b2ce2811cb0189df26ab777a3e
Compilation Analysis: Python Frame Triggered Execution:
Compilation Analysis:   item (/usr/lib/python3.11/site-packages/torch/_tensor.py:40)
Compilation Analysis:   log_metrics (/home/me/project/train_extra.py:12)
Compilation Analysis:   ..........
Compilation Analysis: --------------------------------------------------------------------------------
Compilation Analysis: ================================================================================
Compilation Analysis: ================================================================================
Compilation Analysis: Compilation Cause
Compilation Analysis:   user torch_xla.sync
Compilation Analysis: Python Frame Triggered Execution:
Compilation Analysis:   sync (/usr/lib/python3.11/site-packages/torch_xla/torch_xla.py:87)
Compilation Analysis:   sync (/home/me/project/pkg/runtime.py:86)
Compilation Analysis:   _train_epoch (/home/me/project/pkg/training.py:225)
Compilation Analysis: --------------------------------------------------------------------------------
"""
