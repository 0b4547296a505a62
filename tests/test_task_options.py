"""The baked command line: each task offers its own options only, and every `--no_X` says what it does."""

import os
import subprocess
import sys

import pytest

CLASSIFIER_ONLY = ("--text_pair_column", "--label_column", "--num_labels")
NO_OPTIONS = ("checkpoint", "watch_compilations", "export")  # bool fields that default to True


def shown_help(project) -> str:
    """`python train.py --help`, white space folded."""
    result = subprocess.run(
        [sys.executable, "train.py", "--help"], cwd=project, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return " ".join(result.stdout.split())


@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_help_offers_the_task_s_own_options_and_a_help_for_each_no_option(bake, task):
    shown = shown_help(bake(task=task))
    classifier = task == "text-classification"
    for option in CLASSIFIER_ONLY:
        assert (f"{option} " in shown) == classifier, option
    default_text_column = "sentence1 or text" if classifier else "text"
    assert f"Text column (default: {default_text_column})." in shown
    for name in NO_OPTIONS:
        dashed = name.replace("_", "-")
        assert f"--no_{name}, --no-{dashed} The same as --{name} false. --" in shown, name
    # --checkpoint's own sentence is said once, by --checkpoint.
    assert shown.count("Save checkpoints: after every epoch") == 1
