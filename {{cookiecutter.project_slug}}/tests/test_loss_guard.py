"""A non-finite loss stops the run (loss_guard.py): exit status 3, one line, the last good checkpoint kept.

The NaN is injected in the graph: a forward hook multiplies the training loss by NaN from a chosen optimizer step on,
counting steps in a device buffer (no host branch, so the run's graphs stay the same at every step), or the
evaluation's logits. Each task counts its own non-finite eval losses: test_evaluation_counts.py.
"""

import json
import math

import pytest
from conftest import child_env, python_code, run

from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import latest_checkpoint, read_progress
from {{ cookiecutter.project_slug }}.fault_tolerance.loss_guard import EXIT_CODE, likely_fix

pytestmark = [pytest.mark.xla, pytest.mark.machinery]

# The project's command line, with the task's model built with a NaN from optimizer step sys.argv[1] on.
POISONED_RUN = """
import sys
import torch
from {{ cookiecutter.project_slug }} import cli
from {{ cookiecutter.project_slug }}.tasks import task

poison_from = int(sys.argv.pop(1))
build = task.build_model


def build_poisoned(*args, **kwargs):
    model = build(*args, **kwargs)
    model.register_buffer("poison_steps", torch.zeros(1, dtype=torch.int64), persistent=False)

    def poison(module, inputs, output):
        if poison_from == 0:  # 0: the evaluation's logits instead, training stays finite
            if not module.training:
                output["logits"] = output["logits"] * float("nan")
        elif module.training:
            module.poison_steps += 1
            output["loss"] = output["loss"] * torch.where(module.poison_steps >= poison_from, float("nan"), 1.0)[0]
        return output

    model.register_forward_hook(poison)
    return model


task.build_model = build_poisoned
sys.argv[0] = "train.py"
sys.exit(cli.main())
"""
# 64 examples in batches of 16: 4 optimizer steps an epoch.
SHORT = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--train_batch_size", "16",
         "--compilation_cache", "false", "--export", "false"]


def poisoned_run(output, poison_from: int, *args):
    return run(python_code(POISONED_RUN, str(poison_from), "--output_dir", str(output), *SHORT, *args),
               env=child_env(), check=False)


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_a_nan_in_the_second_epoch_stops_it_and_keeps_the_first_epochs_checkpoint(tmp_path):
    output = tmp_path / "outputs"
    result = poisoned_run(output, 6, "--num_epochs", "3")
    assert result.returncode == EXIT_CODE, result.stderr[-3000:]
    (line,) = error_lines(result)
    kept = output / "checkpoints" / "epoch-1"
    assert "from global step 6 (" in line and "steps 5-8, epoch 2" in line, line
    assert "at precision level bf16" in line and "learning rate 0.001" in line, line
    assert f"the last good checkpoint, kept, is {kept}" in line, line
    assert line.endswith(likely_fix("bf16", 1e-3)), line
    # Stopped before the second epoch's evaluation, checkpoint and report: the last good checkpoint is the newest.
    said = result.stdout + result.stderr
    assert "epoch 1/3: train loss" in said and "epoch 2/3: train loss" not in said
    assert latest_checkpoint(output) == kept and read_progress(kept)["epochs_done"] == 1
    assert not (output / "report.json").exists()
    # The kept checkpoint is a good one: resuming from it (without the NaN) trains the rest of the run.
    resumed = run(python_code(POISONED_RUN, "1000", "--output_dir", str(output), *SHORT, "--num_epochs", "3",
                              "--resume", "--max_recompilations", "0"), env=child_env())
    assert "resume: continuing after epoch 1" in resumed.stdout + resumed.stderr
    report = json.loads((output / "report.json").read_text())
    assert report["epochs_run"] == 2 and math.isfinite(report["eval_loss"])


@pytest.mark.slow
def test_a_nan_before_a_step_checkpoint_stops_the_epoch_there(tmp_path):
    """Checkpoints every 2 steps: the NaN of step 3 is read before step 4's checkpoint, which is not written."""
    output = tmp_path / "outputs"
    result = poisoned_run(output, 3, "--num_epochs", "1", "--save_steps", "2", "--mixed_precision", "no")
    assert result.returncode == EXIT_CODE, result.stderr[-3000:]
    (line,) = error_lines(result)
    kept = output / "checkpoints" / "step-2"
    assert "from global step 3 (2 of the 4 step losses of steps 1-4, epoch 1) at precision level fp32" in line, line
    assert f"the last good checkpoint, kept, is {kept}" in line and line.endswith(likely_fix("fp32", 1e-3)), line
    assert latest_checkpoint(output) == kept
    assert sorted(path.name for path in (output / "checkpoints").iterdir() if path.is_dir()) == ["step-2"]


@pytest.mark.slow
def test_a_nan_in_the_evaluation_stops_the_run_before_the_epochs_checkpoint(tmp_path):
    """Evaluation is guarded too: its sums count the non-finite losses (read with them, no transfer of its own)."""
    output = tmp_path / "outputs"
    result = poisoned_run(output, 0, "--num_epochs", "2", "--save_steps", "2", "--mixed_precision", "no")
    assert result.returncode == EXIT_CODE, result.stderr[-3000:]
    (line,) = error_lines(result)
    kept = output / "checkpoints" / "step-4"
    assert "the eval loss was not finite (NaN or infinite) for 120 of the 120 examples evaluated after global step 4 " \
           "(epoch 1) at precision level fp32" in line, line
    assert f"the last good checkpoint, kept, is {kept}" in line and line.endswith(likely_fix("fp32", 1e-3)), line
    assert latest_checkpoint(output) == kept and not (output / "checkpoints" / "epoch-1").exists()
    assert not (output / "report.json").exists()


def test_the_fix_named_follows_the_precision_level():
    assert likely_fix("fp32", 2e-5) == "try a lower --learning_rate (this run: 2e-05)"
    assert "--mixed_precision no" in likely_fix("bf16", 2e-5)
    assert "--pure_bf16 no" in likely_fix("pure-bf16-cast", 2e-5)

