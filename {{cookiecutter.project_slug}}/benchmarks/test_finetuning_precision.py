"""Fine-tuning a pretrained model in every precision level: the updates each keeps, its eval, its bytes and time.

The demo model is pretrained in float32 once (the setup, not a row), then every level fine-tunes it through the
project's own training function at the task's fine-tuning rate for the same steps (measure_finetuning.py). On
the XLA CPU device the levels run two at a time, each on one core of its own (isolation.Runs), in the table's
order: a row's "job wall s" is how long its test waited for its run, `run_s` the run's own time. On any other
device they run one after another (a TPU takes one process).
"""

import math
import os

import pytest

from . import isolation
from .measure_finetuning import LEVELS, METRIC, fine_tune, pretrain
from .profiles import Profile

# The relative gap of a float32-weight level's reported eval loss to the host's float32 re-evaluation of its
# exported model: two programs (tests/comparing.py derives both bounds). fp32 differs only in the order of float32
# sums (XLA against eager CPU): float32's bound for one forward, 2**-17. bf16 evaluates under autocast, its matmuls in
# bf16: bf16's resolution, 2**-8. Measured on XLA:CPU: below 1e-8 and 2e-5.
EVAL_GAP = {"fp32": 2.0 ** -17, "bf16": 2.0 ** -8}


def runs_at_once() -> int:
    """Two at a time on the XLA CPU device (a run is mostly one core compiling), else one."""
    if os.environ.get("PJRT_DEVICE") == "CPU" and len(os.sched_getaffinity(0)) >= 2:
        return 2
    return 1


class Comparison:
    """The pretrained model and the levels' runs, started in the table's order, collected as the tests ask."""

    def __init__(self, profile: Profile, folder):
        self.pretrained = isolation.run(pretrain, profile, str(folder / "pretrained"))
        model = self.pretrained["model"]
        calls = {level: (fine_tune, level, profile, model, str(folder / level.replace("+", "-"))) for level in LEVELS}
        self.runs = isolation.Runs(calls, at_once=runs_at_once())

    def result(self, level: str) -> dict:
        return self.runs.result(level)


@pytest.fixture(scope="module")
def comparison(profile, tmp_path_factory):
    compared = Comparison(profile, tmp_path_factory.mktemp("finetuning"))
    yield compared
    compared.runs.close()


@pytest.mark.benchmark(group="precision: fine-tuning")
@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.compares("bf16", "the reported eval loss against the export re-evaluated in float32 on the host (fp32: "
                      "float32's bound, bf16: bf16's resolution)")
def test_finetuning_level(benchmark, comparison, level):
    result = benchmark.pedantic(comparison.result, args=(level,), rounds=1, iterations=1)
    fp32 = comparison.result("fp32")
    pretrained = comparison.pretrained
    metric = next(name for name in METRIC.values() if name in result)
    benchmark.extra_info.update(
        result, headline="fraction_changed", update_norm_vs_fp32=result["update_norm"] / fp32["update_norm"],
        pretrained_eval_loss=pretrained["eval_loss"], **{f"pretrained_{metric}": pretrained[metric]},
        pretrain_steps=pretrained["optimizer_steps"], pretrain_s=pretrained["wall_s"],
    )
    assert result["effective"] == level.removesuffix("+kahan"), f"{level} ran as {result['effective']}"
    assert math.isfinite(result["eval_loss"]) and math.isfinite(result["host_eval_loss"]), level
    assert result["optimizer_steps"] == fp32["optimizer_steps"]  # the same steps in every level
    assert result["eval_counted"] == result["eval_counted_on_host"]  # the same eval set on the host
    assert result["recompilations"] == 0
    if level in ("fp32", "bf16"):
        # Float32 weights: every element moves, and the run's own evaluation is the exported model's.
        assert result["fraction_changed"] >= 0.99, result["fraction_changed"]
        assert result["eval_loss_gap_to_host"] < EVAL_GAP[level], result["eval_loss_gap_to_host"]
    else:
        # bf16 weights: half the bytes of fp32's weights and AdamW state (Kahan: one weight-sized buffer more).
        assert result["parameter_bytes_per_device"] * 2 == fp32["parameter_bytes_per_device"]
    if level.startswith("pure-") and not level.endswith("+kahan"):
        default = comparison.result("bf16")
        assert result["fraction_changed"] < default["fraction_changed"], "bf16 weights kept every update"
        assert result["updates_at_risk"] > 0  # and the run said so
    if level.endswith("+kahan"):
        plain = comparison.result(level.removesuffix("+kahan"))
        kahan_off = abs(result["update_norm"] / fp32["update_norm"] - 1)
        plain_off = abs(plain["update_norm"] / fp32["update_norm"] - 1)
        assert kahan_off < plain_off, f"{level}: update norm {kahan_off:.3f} off fp32's, uncompensated {plain_off:.3f}"
        assert result["optimizer_bytes_per_device"] == (
            plain["optimizer_bytes_per_device"] + plain["parameter_bytes_per_device"]
        ), "the compensation is one bf16 buffer per weight"
