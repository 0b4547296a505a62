"""The baked projects' own test suites pass inside the baked copies."""

import pytest

from tests.baking import run_baked_tests


def test_default_project_suite_passes(default_project):
    run_baked_tests(default_project, "tests")


def test_notebook_runs_with_the_model_built_in_each_process(bake):
    """shared_model=no: the default bake above runs the notebook with the shared model."""
    run_baked_tests(bake(shared_model=False), "tests/test_notebook.py")


@pytest.mark.parametrize(
    "answers",
    [
        {"variants": "script", "include_benchmarks": False, "mixed_precision": "no"},
        {"variants": "notebook", "downcast_bf16": True},
    ],
    ids=["script-only", "notebook-only"],
)
def test_other_variants_fast_suites_pass(bake, answers):
    """The tests that need no training run adapt to the files a variant has."""
    run_baked_tests(bake(**answers), "tests", "-m", "not xla and not workers")
