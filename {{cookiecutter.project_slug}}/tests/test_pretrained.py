"""A model saved with save_pretrained fine-tunes through from_pretrained at the bake's defaults (its pretrained
learning rate and precision), in whatever versions are installed: CI's scheduled job `newest` installs without
constraints.txt and runs these (`-m "not slow or pretrained"`). And the model's config bounds the run: a
max_seq_length past its declared positions, or a model folder that is not there, is one line and status 2 before
anything compiles, with no output folder left behind.
"""

import importlib.metadata
import json

import pytest
import transformers
from conftest import TASK, python_command, run

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES
from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer

LENGTH = 32  # tokens a row (a packed block for the language model)
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2}
{%- if cookiecutter.task == "causal-lm" %}
# The default model's architecture (Qwen2.5), rotary positions; GPT-2's are a learned table.
DEFAULT_ARCHITECTURE = "Qwen2ForCausalLM"
ARCHITECTURES = {
    "Qwen2ForCausalLM": ("Qwen2Config", {**SHAPE, "num_key_value_heads": 2}, "max_position_embeddings"),
    "GPT2LMHeadModel": ("GPT2Config", {"n_embd": 64, "n_layer": 2, "n_head": 2}, "n_positions"),
}
{%- else %}
# The default model's architecture (bert-base-cased): a learned position table.
DEFAULT_ARCHITECTURE = "BertForSequenceClassification"
ARCHITECTURES = {
    "BertForSequenceClassification": ("BertConfig", SHAPE, "max_position_embeddings"),
}
{%- endif %}


def save_tiny(folder, architecture: str, positions: int):
    """A random-weight model of `architecture` with the demo's tokenizer, as save_pretrained writes it."""
    tokenizer = load_tokenizer(TrainConfig(demo=True), demo=True)
    config_class, shape, positions_field = ARCHITECTURES[architecture]
    special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.sep_token_id,
               "bos_token_id": tokenizer.cls_token_id}
    config = getattr(transformers, config_class)(vocab_size=len(tokenizer), **shape, **{positions_field: positions},
                                                 **special)
    getattr(transformers, architecture)(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train_args(output, model, *extra) -> list[str]:
    return python_command(
        "--output_dir", str(output), "--model_name_or_path", str(model), "--dataset", "files",
        "--train_file", str(DEMO_FILES["train"]), "--eval_file", str(DEMO_FILES["eval"]),
        "--max_seq_length", str(LENGTH), "--report_to", "none", "--checkpoint", "false", *extra,
    )


@pytest.mark.slow
@pytest.mark.pretrained
def test_a_saved_model_of_the_default_architecture_fine_tunes_at_the_defaults(tmp_path):
    """At the pretrained learning rate and the bake's precision: a few steps, the demo's 2 graphs, and a report
    that names the model and the versions it ran with."""
    model = save_tiny(tmp_path / "model", DEFAULT_ARCHITECTURE, positions=4 * LENGTH)
    output = tmp_path / "outputs"
    run(train_args(output, model, "--num_epochs", "1", "--max_train_examples", "64", "--samples", "0")
        if TASK == "causal-lm" else train_args(output, model, "--num_epochs", "1", "--max_train_examples", "64"))
    report = json.loads((output / "report.json").read_text())
    assert report["model"]["architecture"] == DEFAULT_ARCHITECTURE
    assert report["config"]["model_name_or_path"] == str(model) and report["config"]["demo"] is not True
    assert report["learning_rate"]["first_step"] == TrainConfig().pretrained_learning_rate
    assert (report["xla_compilations"], report["recompilations"]) == (2, 0)
    assert report["versions"]["transformers"] == importlib.metadata.version("transformers")
    assert report["versions"]["accelerate"] == importlib.metadata.version("accelerate")
    assert (output / "model" / "config.json").is_file()


@pytest.mark.pretrained
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_a_max_seq_length_past_the_model_s_positions_is_refused_before_compiling(tmp_path, architecture):
    """XLA's gather clamps a position past a learned table silently: the run trained on garbage and exited 0."""
    model = save_tiny(tmp_path / "model", architecture, positions=LENGTH // 2)
    output = tmp_path / "outputs"
    result = run(train_args(output, model), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: max_seq_length={LENGTH}: past the {LENGTH // 2} positions this model declares "
        f"(max_position_embeddings in its config): lower --max_seq_length to {LENGTH // 2} or less"
    )
    assert not output.exists()


@pytest.mark.pretrained
def test_a_model_folder_that_is_not_there_is_named_as_a_missing_folder(tmp_path):
    output = tmp_path / "outputs"
    missing = tmp_path / "no" / "such" / "model"
    result = run(train_args(output, missing), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: model_name_or_path={str(missing)!r}: no such folder (a path, not a hub id `owner/name`): give a "
        "folder written by save_pretrained"
    )
    assert not output.exists()
