"""train.py, the script variant: run with python and with `accelerate launch`."""

import json
import sys

import pytest
from conftest import PROJECT, QUICK, child_env, run


def test_help_lists_the_options():
    result = run([sys.executable, "train.py", "--help"])
    for option in ("--model_name_or_path", "--mixed_precision", "--downcast_bf16", "--eval_batch_size", "--resume"):
        assert option in result.stdout


def test_bad_flag_value_is_one_clear_line():
    result = run([sys.executable, "train.py", "--train_batch_size", "0"], check=False)
    assert result.returncode == 2
    assert "train_batch_size=0: must be a positive whole number" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.xla
def test_accelerate_launch_runs_the_demo(tmp_path):
    accelerate = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1"]
    output = tmp_path / "outputs"
    run([*accelerate, str(PROJECT / "train.py"), *QUICK, "--output_dir", str(output)], env=child_env())
    report = json.loads((output / "report.json").read_text())
    assert report["distributed_type"] == "XLA"
    assert report["eval_examples_counted"] == 120
    assert report["xla_compilations"] <= 5
