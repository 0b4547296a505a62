"""train.py, the script variant (tests/test_launch.py runs it under `accelerate launch`)."""

import sys

from conftest import run


def test_help_lists_the_options():
    result = run([sys.executable, "train.py", "--help"])
    for option in (
        "--model_name_or_path", "--mixed_precision", "--pure_bf16", "--kahan_summation", "--eval_batch_size", "--resume",
    ):
        assert option in result.stdout
    assert "--downcast_bf16" not in result.stdout  # replaced by --pure_bf16 downcast


def test_bad_flag_value_is_one_clear_line():
    result = run([sys.executable, "train.py", "--train_batch_size", "0"], check=False)
    assert result.returncode == 2
    assert "train_batch_size=0: must be a positive whole number" in result.stderr
    assert "Traceback" not in result.stderr
