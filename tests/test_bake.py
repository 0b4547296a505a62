"""Baking: every choice and the pairs that interact give a complete, valid, fully rendered project."""

import json
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import tomllib
import yaml

from tests.baking import TEMPLATE, pip

TEMPLATE_DIR = TEMPLATE / "{{cookiecutter.project_slug}}"
# Files that exist only for some answers; everything else is always baked. PKG/ is the package (the slug).
NOTEBOOK_ONLY = {"train_on_tpu.ipynb", "tests/test_notebook.py", "PKG/launch/launch_guard.py"}
SCRIPT_ONLY = {"train.py", "tests/test_script.py"}
BENCHMARKS_ONLY_PREFIXES = (
    "benchmarks/", ".github/workflows/benchmarks.yml", "tests/test_benchmark_logic.py", "PKG/watch/memory.py",
    "docs/benchmarks", "docs/benchmark-tables.md", "docs/reference-results.json", "tests/test_benchmark_page.py",
)
# Each task's own files (the post-gen hook keeps the chosen task's).
TASK_ONLY = {
    "text-classification": {
        "PKG/tasks/text_classification.py", "PKG/tasks/roc_auc.py", "PKG/loop/predict_labels.py", "tests/test_data_files.py",
        "tests/test_training.py",
        "tests/test_benchmark_logic.py", "benchmarks/measure_precision.py", "benchmarks/test_precision.py",
        "benchmarks/measure_rehearsal.py",
        "benchmarks/measure_recompilation.py", "benchmarks/test_recompilation.py", "benchmarks/grid.py",
        "benchmarks/workload.py", "benchmarks/test_checkpointing.py", "benchmarks/measure_shared_model.py",
        "benchmarks/test_shared_model_memory.py", "PKG/watch/memory.py", "data/demo/train.csv",
        "data/demo/eval.csv", "benchmarks/measure_quality.py", "benchmarks/test_quality.py",
    },
    "causal-lm": {
        "PKG/tasks/causal_lm.py", "PKG/tasks/instructions.py",
        "PKG/tasks/samples.py", "tests/test_causal_lm.py", "tests/test_instructions.py",
        "benchmarks/test_packing.py", "benchmarks/measure_lm_loops.py", "benchmarks/test_lm_loops.py",
        "data/demo-lm/train.csv", "data/demo-lm/eval.csv", "data/demo-lm/instructions-train.jsonl",
        "data/demo-lm/instructions-eval.jsonl", "data/demo-lm/chat_template.jinja", "tests/chatml_template.jinja",
        "PKG/data/packing.py", "PKG/data/streaming.py", "tests/test_streaming.py", "PKG/loop/generation.py",
        "PKG/parallel/streams.py", "PKG/data/instruction_formats.py", "PKG/loop/predict_continuations.py",
        "benchmarks/test_generation.py", "docs/instruction-data.md",
    },
}
# A Jinja tag left in a baked file. `%}` right after a digit is Python's percent format (f"{share:.1%}").
UNRENDERED = re.compile(r"(?<!\$)\{\{|\{%|(?<![0-9])%\}")

COMBINATIONS = {
    "defaults": {},
    "script-shared": {"variants": "script", "shared_model": True},
    "script-unshared": {"variants": "script", "shared_model": False},
    "notebook-shared": {"variants": "notebook", "shared_model": True},
    "notebook-unshared": {"variants": "notebook", "shared_model": False},
    "both-unshared": {"variants": "both", "shared_model": False},
    "fp32": {"mixed_precision": "no", "pure_bf16": "no"},
    "pure-bf16-xla": {"mixed_precision": "bf16", "pure_bf16": "xla"},
    "pure-bf16-downcast": {"mixed_precision": "bf16", "pure_bf16": "downcast"},
    "pure-bf16-cast": {"mixed_precision": "bf16", "pure_bf16": "cast"},
    "no-benchmarks": {"include_benchmarks": False},
    "custom-sizes": {"train_batch_size": 32, "eval_batch_size": 64, "max_seq_length": 256, "num_processes": 4},
    "fsdp": {"parallelism": "fsdp"},
    "causal-lm": {"task": "causal-lm"},
    "causal-lm-fsdp-notebook": {"task": "causal-lm", "parallelism": "fsdp", "variants": "notebook"},
}


def template_files(slug: str) -> set[str]:
    files = {".cruft.json"}  # written by the post-gen hook
    for path in TEMPLATE_DIR.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            files.add(str(path.relative_to(TEMPLATE_DIR)).replace("{{cookiecutter.project_slug}}", slug))
    return files


def expected_files(answers: dict, slug: str) -> set[str]:
    def named(paths) -> set[str]:
        return {path.replace("PKG/", f"{slug}/") for path in paths}

    files = template_files(slug)
    variants = answers.get("variants", "both")
    if variants == "script":
        files -= named(NOTEBOOK_ONLY)
    if variants == "notebook":
        files -= named(SCRIPT_ONLY)
    task = answers.get("task", "text-classification")
    for other, only in TASK_ONLY.items():
        if other != task:
            files -= named(only)
    # Each task's reference benchmark run and the page it draws (docs/reference/<task>/): the hook moves the task's
    # into docs/ and drops the folder.
    reference = {name for name in files if name.startswith("docs/reference/")}
    files = (files - reference) | {"docs/" + name.split("/", 3)[3] for name in reference if name.split("/")[2] == task}
    if not answers.get("include_benchmarks", True):
        files = {name for name in files if not name.startswith(tuple(named(BENCHMARKS_ONLY_PREFIXES)))}
    return files


def baked_files(project: Path) -> set[str]:
    return {str(path.relative_to(project)) for path in project.rglob("*") if path.is_file()}


@pytest.fixture(params=list(COMBINATIONS), ids=list(COMBINATIONS))
def baked(request, bake_once):
    """Read only: the folder is shared by every test of its combination (conftest.bake_once)."""
    answers = COMBINATIONS[request.param]
    return answers, bake_once(**answers)


def test_exact_file_tree(baked):
    answers, project = baked
    assert baked_files(project) == expected_files(answers, project.name)


@pytest.mark.parametrize(("task", "slug"), [("text-classification", "tpu_text_classifier"), ("causal-lm", "tpu_causal_lm")])
def test_the_default_name_fits_the_task(bake, task, slug):
    project = bake(task=task)
    assert project.name == slug
    assert (project / slug / "tasks" / f"{task.replace('-', '_')}.py").is_file()


def test_nothing_left_unrendered(baked):
    _, project = baked
    for path in project.rglob("*"):
        # A chat template (.jinja) is Jinja by design, copied without rendering (cookiecutter.json); a PNG is no text.
        if path.is_file() and path.suffix not in (".csv", ".jinja", ".png"):  # and the benchmark page's pictures
            text = path.read_text(encoding="utf-8")
            assert not UNRENDERED.search(text), f"{path.relative_to(project)} holds an unrendered Jinja tag"


def test_python_compiles_and_passes_ruff(baked, tmp_path):
    _, project = baked
    for path in project.rglob("*.py"):
        py_compile.compile(str(path), cfile=str(tmp_path / "compiled.pyc"), doraise=True)
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=project, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_data_files_parse(baked):
    _, project = baked
    parsed = 0
    for path in project.rglob("*"):
        if path.suffix in (".yaml", ".yml"):
            yaml.safe_load(path.read_text())
        elif path.suffix == ".json" or path.name == ".cruft.json":
            json.loads(path.read_text())
        elif path.suffix == ".toml":
            tomllib.loads(path.read_text())
        elif path.suffix == ".ipynb":
            nbformat.validate(nbformat.read(path, as_version=4))
        else:
            continue
        parsed += 1
    assert parsed >= 2  # at least pyproject.toml and .cruft.json


def test_answers_recorded_for_cruft(baked):
    answers, project = baked
    recorded = json.loads((project / ".cruft.json").read_text())
    context = recorded["context"]["cookiecutter"]
    assert Path(recorded["template"]).resolve() == TEMPLATE.resolve()
    for name, value in answers.items():
        assert str(context[name]) == str(value), name
    # The default model follows the task.
    expected = "Qwen/Qwen2.5-0.5B" if answers.get("task") == "causal-lm" else "bert-base-cased"
    assert context["model_name_or_path"] == expected


def level(answers: dict) -> str:
    """The precision level a bake's runs get by default (precision.requested_level's names)."""
    if answers["mixed_precision"] == "no":
        return "fp32"
    return "bf16" if answers["pure_bf16"] == "no" else f"pure-bf16-{answers['pure_bf16']}"


def test_precision_answers_reach_the_package_and_stay_out_of_accelerates_configs(baked):
    """The baked answers are the script's defaults; the Accelerate configs say "no" so that the TPU launcher
    sets no XLA_USE_BF16 of its own (which the script would read as a request for pure bf16)."""
    answers, project = baked
    chosen = {"mixed_precision": "bf16", "pure_bf16": "no", **answers}
    source = (project / project.name / "precision" / "levels.py").read_text()
    assert f"BAKED_MIXED_PRECISION = {json.dumps(chosen['mixed_precision'])}\n" in source
    assert f"BAKED_PURE_BF16 = {json.dumps(chosen['pure_bf16'])}\n" in source
    for config in (project / "configs").glob("*.yaml"):
        settings = yaml.safe_load(config.read_text())
        assert settings["mixed_precision"] == "no" and settings["downcast_bf16"] is False, config.name


ENTRY_POINTS = {
    "both": "`train.py` script and `train_on_tpu.ipynb` notebook",
    "script": "`train.py` script only",
    "notebook": "`train_on_tpu.ipynb` notebook only",
}


def test_the_docs_name_the_chosen_options(baked):
    answers, project = baked
    chosen = {**{"variants": "both", "shared_model": True, "mixed_precision": "bf16", "pure_bf16": "no",
                 "train_batch_size": 16, "max_seq_length": 128, "num_processes": 8, "parallelism": "data",
                 "task": "text-classification"}, **answers}
    chosen.setdefault("eval_batch_size", chosen["train_batch_size"])
    rows = {
        line.split("|")[1].strip(): line.split("|")[2].strip()
        for line in (project / "docs" / "choices.md").read_text().splitlines()
        if line.startswith("| ") and line.count("|") >= 4
    }
    assert rows["task"] == f"`{chosen['task']}`"
    assert rows["entry points"].startswith(ENTRY_POINTS[chosen["variants"]])
    assert rows["shared model"].startswith("yes" if chosen["shared_model"] else "no")
    assert rows["mixed precision"] == f"`{chosen['mixed_precision']}`"
    assert rows["pure_bf16"].startswith(f"`{chosen['pure_bf16']}` (so the default level is **{level(chosen)}**)")
    assert rows["parallelism"].startswith(f"`{chosen['parallelism']}`")
    assert rows["train batch size (per chip)"] == str(chosen["train_batch_size"])
    if int(chosen["eval_batch_size"]) == int(chosen["train_batch_size"]):  # left alone: it follows the run's train batch
        assert rows["eval batch size (per chip)"].startswith("the run's train batch per chip")
    else:
        assert rows["eval batch size (per chip)"] == str(chosen["eval_batch_size"])
    assert rows["max sequence length"].startswith(str(chosen["max_seq_length"]))
    assert rows["num_processes in `configs/tpu-vm.yaml`"].startswith(str(chosen["num_processes"]))


def test_baked_project_builds_a_wheel(default_project, tmp_path):
    """The generated pyproject is a real, installable Python project."""
    pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), ".", cwd=default_project)
    (wheel,) = tmp_path.glob("tpu_text_classifier-0.1.0-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "tpu_text_classifier/loop/training.py" in names
    assert "tpu_text_classifier/precision/levels.py" in names
    assert "tpu_text_classifier/xla/runtime.py" in names
