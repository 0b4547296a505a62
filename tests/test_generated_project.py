"""The baked projects' own test suites pass inside the baked copies.

The four bakes users pick for their task and layout run their whole suites; every other answer runs its fast tier
(`-m "not slow"`, the tests that train nothing). A baked test trains at its bake's parallelism unless it is about
one layout, and then runs in that layout's bakes; the loop's machinery (resume, several processes, the watch,
launchers, the loss guard, hosts), the same for both tasks, is tested in the default bake (and in the fsdp one where
it is about fsdp); the causal-LM bakes test what the task changes. So the four suites together run every test once.
"""

import pytest

from tests.baking import run_baked_tests

# The run order of `make test`'s two workers (each keeps one test queued): the default suite, the longest, beside the
# causal-LM benchmark profile, the shortest long test; then the fsdp and causal-LM suites; then the rest
# (benchmarks/test_reference_suite.py ranks the profiles).
WHOLE = {
    "default": {},
    "causal-lm": {"task": "causal-lm"},
    "fsdp": {"parallelism": "fsdp"},
    "causal-lm-fsdp": {"task": "causal-lm", "parallelism": "fsdp"},
}
# Every value of every choice cookiecutter.json offers that the four bakes above do not take, each in at least one
# bake (the three pure bf16 levels need three), with the pairs that interact: pure_bf16 needs bf16, and the notebook
# and the script each stand alone. Two of them run their fast tier in tests/test_newest_versions.py instead, installed
# without constraints.txt (NEWEST there).
FAST_TIER = {
    "notebook-downcast-unshared": {"variants": "notebook", "pure_bf16": "downcast", "shared_model": False},
    "causal-lm-fsdp-cast-script": {"task": "causal-lm", "parallelism": "fsdp", "pure_bf16": "cast",
                                   "variants": "script"},
}
# Besides its fast tier, a bake runs the slow tests its answers change: without the shared model (shared_model=no),
# the notebook builds the model in each process, which the default bake's notebook tests never do.
ALSO = {"notebook-downcast-unshared": "notebook"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow(first=rank))
                                  for name, rank in zip(WHOLE, (0, 3, 2, 4), strict=True)])
def test_whole_suite_passes(bake, name):
    run_baked_tests(bake(**WHOLE[name]), "tests", name=name)


@pytest.mark.check_only
@pytest.mark.parametrize("task", ["text-classification", "causal-lm"])
def test_each_task_s_fast_tier_passes(bake, task):
    """The inner loop's share (make check): what each task's bake tests without training. make test runs these
    tests inside the whole suites above instead."""
    run_baked_tests(bake(task=task), "tests", "-m", "not slow", name=f"fast-{task}")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAST_TIER))
def test_other_answers_fast_tiers_pass(bake, name):
    """The tests that need no training run adapt to the files and answers each bake has (and ALSO's slow ones)."""
    marks = f"not slow or {ALSO[name]}" if name in ALSO else "not slow"
    run_baked_tests(bake(**FAST_TIER[name]), "tests", "-m", marks, name=f"fast-{name}")
