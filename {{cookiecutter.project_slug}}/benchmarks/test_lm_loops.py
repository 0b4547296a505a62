"""The causal-LM loop against TRL's SFTTrainer on one workload (measure_lm_loops.py): graphs, recompilations and
their causes, compile seconds, steady tokens per second and wall seconds, with ratios to the project's loop.

A row whose configuration does not run on XLA here records its error and still passes: that is its measurement.
"""

import math

import pytest

from . import rounds
from .measure_lm_loops import LEAD_OVER, LOOPS, lead_over_rounds, measure, ratios


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict:
    # Imported once here, in the parent that never touches a device, for every forked row to inherit (2 s each).
    from trl import SFTConfig, SFTTrainer  # noqa: F401

    return {"folder": tmp_path_factory.mktemp("lm-loops")}


def project_row(profile, rows) -> dict:
    """The project's row, measured first (or now, when a selection left it out)."""
    if "project" not in rows:
        rows["project"] = measure("project", profile, str(rows["folder"] / "project"))
    return rows["project"]


@pytest.mark.benchmark(group="causal-lm: loops")
@pytest.mark.parametrize("loop", list(LOOPS))
@pytest.mark.compares("float32", "eval loss of the project's loop: FSDPv2 over 4 devices against one")
def test_lm_loop(benchmark, profile, rows, loop):
    folder = str(rows["folder"] / loop)
    result = benchmark.pedantic(measure, args=(loop, profile, folder), rounds=1, iterations=1)
    rows[loop] = result
    project = project_row(profile, rows)
    benchmark.extra_info.update(result, headline="graphs", **ratios(result, project))
    assert project["status"] == "ok", project.get("reason")
    if loop.startswith("project"):
        assert result["status"] == "ok", result.get("reason")
        assert result["recompilations"] == 0 and result["recompilation_causes"] == "none", result
        assert result["graphs"] == project["graphs"] == 2  # the train step, the eval step
        assert result["steady_tokens_per_second"] > 0
        # FSDPv2 over 4 devices trains the same blocks to the same loss as one device, in another program: within
        # float32's bound for its steps (2**-17 a step, relative: tests/comparing.py).
        apart = 2.0 ** -17 * project["optimizer_steps"]
        assert abs(result["eval_loss"] - project["eval_loss"]) <= apart * project["eval_loss"]
    elif result["status"] == "ok":
        assert result["optimizer_steps"] == project["optimizer_steps"]  # the same work
        assert math.isfinite(result["eval_loss"])
        assert result["graphs"] > project["graphs"], result
    else:
        assert result["reason"], result  # what failed, in one line, instead of a missing row


@pytest.mark.benchmark(group="causal-lm: lead over SFTTrainer")
@pytest.mark.timing
def test_tokens_per_second_against_sfttrainer(benchmark, profile, rows):
    """The project's loop and SFTTrainer (the set-up that trains on XLA), one after the other,
    `profile.steady_rounds` times, each round in the other order than the last: a single run's speed moves with the
    machine's load, a ratio of runs side by side much less (rounds.py). Marked `timing`: `make test` runs it with
    nothing else running."""
    folder = rows["folder"] / "lead"
    runs = benchmark.pedantic(rounds.alternating, args=(
        profile.steady_rounds,
        lambda index: measure("project", profile, str(folder / f"project-{index}")),
        lambda index: measure(LEAD_OVER, profile, str(folder / f"sft-{index}")),
    ), rounds=1, iterations=1)
    assert {row["status"] for row in runs[0] + runs[1]} == {"ok"}, [row.get("reason") for row in runs[0] + runs[1]]
    figures = lead_over_rounds(*runs)
    benchmark.extra_info.update(figures, device=runs[0][0]["device"], headline="tokens_per_second_lead")
    assert figures["rounds"] == profile.steady_rounds
    # Every round is the same work: the project's 2 graphs, none after warm-up; SFTTrainer's steps as many.
    assert {row["graphs"] for row in runs[0]} == {2} and {row["recompilations"] for row in runs[0]} == {0}
    assert {row["optimizer_steps"] for row in runs[0] + runs[1]} == {runs[0][0]["optimizer_steps"]}
    assert figures["tokens_per_second_lead"] > 0
