"""Full size: the host's tracing per step against the chip's compute, at the default model's real layer count
(measure_host_tracing.py says how). On a TPU the chip waits whenever the host traces longer than it computes.

All rows are measured in one forked child, one after the other, so that their ratios compare like with like.
"""

import pytest

from . import isolation
from .measure_host_tracing import BATCH, EVAL_SHARE, LENGTH, MFU, MODEL, ROWS, SEVERAL, all_rows


@pytest.fixture(scope="module")
def measured() -> dict:
    return {}  # filled by the first row's test


@pytest.mark.benchmark(group="full size: host against chip")
@pytest.mark.parametrize("row", ROWS)
def test_host_against_chip(benchmark, profile, measured, row):
    if not measured:
        measured.update(benchmark.pedantic(isolation.run, args=(all_rows, profile), rounds=1, iterations=1))
    else:
        benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # measured with the first row, in the same child
    result, plain = measured["rows"][row], measured["rows"]["plain"]
    # An evaluation batch against the chip's forward (EVAL_SHARE of the step), every other row against the step.
    chips = {chip: ms * (EVAL_SHARE if row.startswith("eval-") else 1) for chip, ms in measured["chip_ms"].items()}
    # Each chip's host time a step: project-default's at the K auto chooses for that chip, every other row's its own.
    host = {chip: result["per_chip"][chip]["tracing_ms"] if "per_chip" in result else result["tracing_ms"] for chip in chips}
    benchmark.extra_info.update(
        headline="host_over_chip_v5e", model=MODEL, batch=f"{BATCH} x {LENGTH}", layers=result["layers"],
        tensors=result["tensors"], tracing_ms=result["tracing_ms"], forward_ms=result["forward_ms"],
        backward_ms=result["backward_ms"], optimizer_ms=result["optimizer_ms"], whole_step_ms=result["whole_step_ms"],
        chip_ms_v5e=chips["v5e"], chip_ms_v6e=chips["v6e"], chip_ms_v7x=chips["tpu7x"],
        host_over_chip_v5e=host["v5e"] / chips["v5e"], host_over_chip_v6e=host["v6e"] / chips["v6e"],
        host_over_chip_v7x=host["tpu7x"] / chips["tpu7x"],
        steps_per_execution=({chip: found["k"] for chip, found in result["per_chip"].items()} if "per_chip" in result
                             else SEVERAL.get(row, 1 if row.startswith("project-jax") else "n/a")),
        tracing_vs_plain=result["tracing_ms"] / plain["tracing_ms"], compilations=result["compilations"],
        steps_timed=result["steps_timed"], spread_ms=result["spread_ms"], mfu_assumed=MFU, device=measured["device"],
    )
    assert result["tensors"] == plain["tensors"] and result["steps_timed"] >= 4
    assert result["tracing_ms"] > 0
    assert result["compilations"] == 0  # every traced step was dropped, never compiled (discard_traced)
    if row.startswith("eval-"):  # one batch's trace: counted as the forward's phase
        assert result["forward_ms"] > 0 and result["compilations"] == 0
    if row.startswith("project-jax") or row == "project-default":
        # The whole step is one call: nothing is traced op by op (the ratio's targets are the README's to report).
        assert result["forward_ms"] == result["backward_ms"] == result["optimizer_ms"] == 0 < result["whole_step_ms"]
