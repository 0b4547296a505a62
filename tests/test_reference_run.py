"""The template's docs/benchmarks.md and each task's reference run: every figure drawn from a committed results file.

tools/reference_run.py writes them (`make results`); here the template's page is drawn again from a default bake of
the committed files and compared, line for line. Each bake's own page is held to its file by the bake's
tests/test_benchmark_page.py, which the whole suites run.
"""

import json

import pytest

from tests.baking import TEMPLATE, load_tool

REFERENCE = TEMPLATE / "{{cookiecutter.project_slug}}" / "docs" / "reference"


@pytest.fixture(scope="module")
def tool():
    return load_tool("reference_run")


def test_the_template_s_page_is_short_and_is_what_the_default_bake_s_reference_draws(tool, bake_once):
    project = bake_once()
    text, pictures = tool.template_page(project)
    page = (TEMPLATE / "docs" / "benchmarks.md").read_text()
    assert len(page.splitlines()) <= tool.MAX_LINES
    assert page == text, "docs/benchmarks.md differs from the committed reference: make results"
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## What does each way of batching the evaluation add?",
                            "## What does each precision level put in the graph, store, and lose?"]
    # Its pictures are the default bake's, byte for byte.
    assert pictures and all((TEMPLATE / "docs" / name).read_bytes() == (project / "docs" / name).read_bytes()
                            for name in pictures)


@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_each_task_s_reference_run_is_committed_with_its_page(task):
    folder = REFERENCE / task
    run = json.loads((folder / "reference-results.json").read_text())
    assert run["records"] and run["made"] and run["machine"] and run["devices"]
    assert {entry["group"] for entry in run["records"]} >= {"precision: fine-tuning"}
    assert (folder / "benchmarks.md").read_text().startswith("# Benchmarks at a glance")
    assert sorted(path.name for path in folder.glob("*.png")) == (
        ["benchmarks-padding.png", "benchmarks-precision.png"] if task == "causal-lm" else
        ["benchmarks-eval-batching.png", "benchmarks-precision.png"])


def test_chip_waiting_s_tables_are_drawn_from_the_reference_runs_and_its_sentences_hold(tool):
    assert tool.CHIP_WAITING.read_text() == tool.chip_waiting(), "docs/chip-waiting.md's tables: make results"
    rows = {task: tool.full_size(task)[1] for task in tool.DEFAULTS}
    for found in rows.values():
        chip = next(iter(found.values()))
        lazy = [found[name] for name in ("plain", "project-lazy", "tuned-trainer", "sft-trainer") if name in found]
        # "Above the chip's time ... every lazy row, on every chip."
        assert all(row["tracing_ms"] > chip[f"chip_ms_{key}"] for row in lazy for key in ("v5e", "v6e", "v7x"))
        # "The JAX step, one step a call, brings both models below a v5e's compute time"
        assert found["project-jax"]["host_over_chip_v5e"] < 1
        # "with the defaults the host's time is at most half of a v6e's step and under a TPU7x device's"
        assert found["project-default"]["host_over_chip_v6e"] <= 0.5 and found["project-default"]["host_over_chip_v7x"] < 1
    # "on a v6e bert-base-cased's, the smaller step, would still wait"
    assert rows["text-classification"]["project-jax"]["host_over_chip_v6e"] > 1
