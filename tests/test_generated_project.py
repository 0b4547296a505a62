"""The baked projects' own test suites pass inside the baked copies."""

import json
import os
import subprocess
import sys

import pytest

from tests.baking import run_baked_tests


def test_default_project_suite_passes(default_project):
    run_baked_tests(default_project, "tests")


def test_causal_lm_project_suite_passes(bake):
    """task=causal-lm: its whole suite (data, instructions, LoRA, samples, both layouts, several processes, resume,
    the watch, launchers, the notebook and the architecture matrix) against the same loop."""
    run_baked_tests(bake(task="causal-lm"), "tests")


def test_notebook_runs_with_the_model_built_in_each_process(bake):
    """shared_model=no: the default bake above runs the notebook with the shared model."""
    run_baked_tests(bake(shared_model=False), "tests/test_notebook.py")


@pytest.mark.parametrize(
    "answers",
    [
        {"variants": "script", "include_benchmarks": False, "mixed_precision": "no"},
        {"variants": "notebook", "pure_bf16": "downcast"},
    ],
    ids=["script-only", "notebook-only"],
)
def test_other_variants_fast_suites_pass(bake, answers):
    """The tests that need no training run adapt to the files a variant has."""
    run_baked_tests(bake(**answers), "tests", "-m", "not xla and not workers")


def test_an_fsdp_bake_trains_with_fsdp_by_default_and_launches_one_process_per_host(bake):
    """parallelism=fsdp at bake time: the default of every run, the pod launcher and the notebook follow it."""
    project = bake(parallelism="fsdp")
    run_baked_tests(project, "tests/test_launch.py", "tests/test_notebook.py", "-k", "pod or fsdp")
    output = project / "outputs"
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "HF_HUB_OFFLINE": "1"}
    quick = ["--demo", "--max_seq_length", "32", "--max_train_examples", "64", "--num_epochs", "1", "--export", "false"]
    subprocess.run([sys.executable, "train.py", "--output_dir", str(output), *quick], cwd=project, env=env, check=True,
                   capture_output=True, timeout=900)
    layout = json.loads((output / "report.json").read_text())["layout"]
    assert layout["parallelism"] == "fsdp" and layout["mesh"] == {"fsdp": 2}
