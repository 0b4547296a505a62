"""A model saved with save_pretrained fine-tunes through from_pretrained at the bake's defaults (its pretrained
learning rate and precision), in whatever versions are installed: CI's scheduled job `newest` installs without
constraints.txt and runs these (`-m "not slow or pretrained"`). And the model's config bounds the run: a
max_seq_length past its declared positions, or a model folder that is not there, is one line and status 2 before
anything compiles, with no output folder left behind.

The models are the architecture matrix's (tests/model_matrix.py): tiny, random weights, 4 x LENGTH positions.
"""

import importlib.metadata
import json

import pytest
from conftest import TASK, python_command, readme_flags, run
from model_matrix import ARCHITECTURES, LENGTH, demo_tokenizer, write_model

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES

# The default model's architecture (bert-base-cased; Qwen2.5 for the causal LM), and one model of each kind of
# position the refusal covers: a learned table (BERT, GPT-2) and rotary positions (Qwen2).
DEFAULT_ARCHITECTURE = "Qwen2" if TASK == "causal-lm" else "BERT"
POSITION_KINDS = ["Qwen2", "GPT-2"] if TASK == "causal-lm" else ["BERT"]
POSITIONS = 4 * LENGTH  # what model_matrix gives each of them


def train_args(output, model, length: int, *extra) -> list[str]:
    return python_command(
        "--output_dir", str(output), "--model_name_or_path", str(model), "--dataset", "files",
        "--train_file", str(DEMO_FILES["train"]), "--eval_file", str(DEMO_FILES["eval"]),
        "--max_seq_length", str(length), "--report_to", "none", "--checkpoint", "false", *extra,
    )


@pytest.mark.slow
@pytest.mark.pretrained
def test_a_saved_model_of_the_default_architecture_fine_tunes_at_the_defaults(tmp_path):
    """The README's "your own data" command on the demo's files, at the pretrained learning rate and the bake's
    precision: a few steps, the demo's 2 graphs, and a report that names the model and the versions it ran with."""
    model = write_model(tmp_path / "model", DEFAULT_ARCHITECTURE, demo_tokenizer())
    output = tmp_path / "outputs"
    # The README's "your own data" command (demo-sized), given a saved model: the hub's is out of reach here.
    run(train_args(output, model, LENGTH, *readme_flags("your own data"), "--num_epochs", "1", "--max_train_examples",
                   "64", *(["--samples", "0"] if TASK == "causal-lm" else [])))
    report = json.loads((output / "report.json").read_text())
    assert report["model"]["architecture"] == ARCHITECTURES[DEFAULT_ARCHITECTURE][1]
    assert report["config"]["model_name_or_path"] == str(model) and report["config"]["demo"] is not True
    assert report["learning_rate"]["first_step"] == TrainConfig().pretrained_learning_rate
    assert (report["xla_compilations"], report["recompilations"]) == (2, 0)
    assert report["versions"]["transformers"] == importlib.metadata.version("transformers")
    assert report["versions"]["accelerate"] == importlib.metadata.version("accelerate")
    assert (output / "model" / "config.json").is_file()


@pytest.mark.pretrained
@pytest.mark.parametrize("architecture", POSITION_KINDS)
def test_a_max_seq_length_past_the_model_s_positions_is_refused_before_compiling(tmp_path, architecture):
    """XLA's gather clamps a position past a learned table silently: the run trained on garbage and exited 0."""
    model = write_model(tmp_path / "model", architecture, demo_tokenizer())
    output = tmp_path / "outputs"
    result = run(train_args(output, model, 2 * POSITIONS), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: max_seq_length={2 * POSITIONS}: past the {POSITIONS} positions this model declares "
        f"(max_position_embeddings in its config): lower --max_seq_length to {POSITIONS} or less"
    )
    assert not output.exists()


@pytest.mark.pretrained
def test_a_model_folder_that_is_not_there_is_named_as_a_missing_folder(tmp_path):
    output = tmp_path / "outputs"
    missing = tmp_path / "no" / "such" / "model"
    result = run(train_args(output, missing, LENGTH), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: model_name_or_path={str(missing)!r}: no such folder (a path, not a hub id `owner/name`): give a "
        "folder written by save_pretrained"
    )
    assert not output.exists()
