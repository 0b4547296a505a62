"""The notebook is built by tools/build_notebook.py, never edited by hand, and bakes into a valid notebook."""

import nbformat
import pytest

from tests.baking import DEFAULT_SLUG, load_tool, template_defaults


def load_builder():
    return load_tool("build_notebook")


def test_committed_notebook_is_what_the_builder_writes():
    builder = load_builder()
    assert builder.NOTEBOOK.read_text(encoding="utf-8") == builder.build(), (
        "train_on_tpu.ipynb differs from tools/build_notebook.py: run `python tools/build_notebook.py`"
    )


def cell(notebook, cell_id: str) -> str:
    return next(cell.source for cell in notebook.cells if cell.get("id") == cell_id)


ANSWERS = [
    {"shared_model": True},
    {"shared_model": False, "variants": "notebook", "include_benchmarks": False, "pure_bf16": "cast"},
]


@pytest.mark.parametrize("answers", ANSWERS, ids=["shared-model", "model-per-process-notebook-only"])
def test_baked_notebook_is_valid_and_follows_the_answers(bake, answers):
    project = bake(**answers)
    shared_model = answers["shared_model"]
    notebook = nbformat.read(project / "train_on_tpu.ipynb", as_version=4)
    nbformat.validate(notebook)
    text = (project / "train_on_tpu.ipynb").read_text(encoding="utf-8")
    assert "{{" not in text and "{%" not in text
    assert f"from {DEFAULT_SLUG}.loop.training import training_function" in cell(notebook, "imports")
    assert "notebook_launcher(training_function, (model, config)" in cell(notebook, "launch")
    assert "check_before_launch(model" in cell(notebook, "launch")
    if shared_model:
        assert "model = task.build_model(config" in cell(notebook, "model")
        assert f"from {DEFAULT_SLUG}.tasks import task" in cell(notebook, "imports")
    else:
        assert cell(notebook, "model").startswith("model = None")
        assert "tasks import" not in cell(notebook, "imports") and "load_tokenizer" not in cell(notebook, "imports")
    intro = cell(notebook, "intro")
    assert ("train.py" in intro) == (answers.get("variants", "both") != "notebook")
    assert ("benchmarks/" in text) == answers.get("include_benchmarks", True)
    precision = cell(notebook, "config-why")
    assert f'`mixed_precision="bf16"`, `pure_bf16="{answers.get("pure_bf16", "no")}"`):' in precision
    assert "kahan_summation=True" in precision
    version = template_defaults()["_torch_version"]
    assert f'"torch=={version}" "torch_xla[tpu]=={version}" -e . -c constraints.txt' in cell(notebook, "install")
