"""plan.py --rehearse: the run staged on XLA:CPU with nothing run, each of its graphs compiled for a TPU by libtpu.

Faithful: the graphs the rehearsal lists are the graphs a real run of the same flags compiles, counted by the real
run's own graph watch, phase by phase, in this bake's layout and task over 4 devices. A narrowed model (the demo's,
exported): seconds a graph.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import PARALLELISM, QUICK, TASK, child_env, python_command, run

PHASES = {"training step": "train", "evaluation": "eval"}
DATA = Path(__file__).resolve().parents[1] / "data" / ("demo-lm" if TASK == "causal-lm" else "demo")


@pytest.mark.slow
@pytest.mark.machinery
def test_the_rehearsal_lists_the_graphs_a_real_run_compiles(tmp_path):
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    demo = tmp_path / "demo"
    run(python_command(*QUICK, "--output_dir", str(demo), "--parallelism", "data"))
    flags = ["--model_name_or_path", str(demo / "model"), "--demo", "false", "--train_file", str(DATA / "train.csv"),
             "--eval_file", str(DATA / "eval.csv"), "--max_seq_length", "64", "--parallelism", PARALLELISM,
             "--train_batch_size", "4", "--eval_batch_size", "4"]
    real_report = tmp_path / "run.json"
    run(python_command(*flags, "--output_dir", str(tmp_path / "run"), "--num_epochs", "2", "--report",
                       str(real_report)), env=child_env(CPU_NUM_DEVICES="4"))
    plan_report = tmp_path / "plan.json"
    run(python_command(*flags, "--tpu", "v5e-4", "--rehearse", "--compile_cache", str(tmp_path / "cache"),
                       "--report", str(plan_report), module="plan"))
    real = json.loads(real_report.read_text())["graphs"]["graphs"]
    rehearsal = json.loads(plan_report.read_text())["targets"]["v5e-4"]["rehearsal"]
    assert Counter(PHASES.get(graph["kind"], "other") for graph in rehearsal["graphs"]) == \
        Counter(graph["phase"] for graph in real), (rehearsal["graphs"], real)
    assert rehearsal["fits"] is True
    for graph in rehearsal["graphs"]:
        assert graph["peak_bytes"] > 0 and graph["compile_seconds"] > 0 and graph["flops"] > 0, graph
        assert graph["unreached_pending"] == 0 or graph["kind"] != "training step", graph
    step = next(graph for graph in rehearsal["graphs"] if graph["kind"] == "training step")
    # The weights and moments the step writes over are donated, as torch_xla donates them; over 4 chips the step
    # holds collectives (the data layout's gradient all-reduce, fsdp's gathers).
    assert step["donors"] > 0 and step["parts"]["aliased"] > 0, step
    assert step["collectives"] > 0, step
    assert step["batch_shapes"]["input_ids"] == [16, 64]  # 4 a chip, over 4 chips
