"""Gradient clipping (--max_grad_norm, 1.0 by default as in transformers' Trainer): the global norm it clips is the
same number on one device and on four sharded ones (FSDPv2), the same in two processes (after their gradients are
reduced),
it is computed in the step's graph (no graph and no transfer of its own), and 0 turns it off. The training tests are
the loop's machinery: they run in the text-classification data-layout project (tests/conftest.py).
"""

import json

import pytest
from comparing import float32_apart
from conftest import NORMS, QUICK, python_code, run, spmd_env, train_in_workers

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig

# The lazy step's clip_gradients, where NORMS reads the norms; the JAX step's clipping, inside its function, is
# tests/test_jax_step.py's (the same norms within float32's bound, on one device and on four).
RUN = [*QUICK, "--mixed_precision", "no", "--checkpoint", "false", "--export", "false", "--step_function", "lazy"]
CLIP = 0.2  # below most of the demo's norms (0.17 to 0.53 in its first 6 steps), so that most steps are clipped


def norms_and_report(folder, *args, env=None) -> tuple[list[float], dict]:
    folder.mkdir(parents=True)
    record, output = folder / "norms.json", folder / "outputs"
    run(python_code(NORMS, str(record), "--output_dir", str(output), *RUN, *args), env=env)
    return json.loads(record.read_text()), json.loads((output / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.workers
@pytest.mark.compares("float32", "the clipped norms of 6 steps: 4 sharded devices against one; 2 gloo processes' "
                      "norms against each other (bit for bit: one all-reduce)")
def test_the_norm_is_global_over_four_sharded_devices_and_over_two_processes(tmp_path):
    clip = ["--max_grad_norm", str(CLIP)]
    one, report = norms_and_report(tmp_path / "one", *clip)
    four, sharded = norms_and_report(tmp_path / "four", "--parallelism", "fsdp", *clip, env=spmd_env(4))
    train_in_workers(tmp_path / "two", 2, *RUN, *clip)
    record = tmp_path / "two" / "learning-rates"
    two = [json.loads((record / f"norms-{rank}.json").read_text()) for rank in (0, 1)]
    steps = report["learning_rate"]["optimizer_steps"]
    assert len(one) == len(four) == len(two[0]) == len(two[1]) == steps
    assert sum(norm > CLIP for norm in one) >= steps // 2  # most steps are clipped, so the later norms depend on it
    # FSDPv2: the first step's gradients, from the same weights and the same 16 examples, summed in another order
    # (two programs: within float32's bound for one step, tests/comparing.py); a norm over one device's shards alone
    # would be about half. Then the runs drift apart by rounding, more than a step's bound: a clipped step scales its
    # whole update by 0.2 over its norm, so a norm's rounding moves every weight by that much.
    assert four[0] == pytest.approx(one[0], rel=float32_apart(1)) and four == pytest.approx(one, rel=1e-3)
    # Two processes: each computed its gradients from its own 8 examples, and both clip the same norm at every step,
    # that of the reduced gradients. (Not the one device's number: the gloo workers draw other dropout masks.)
    assert two[0] == two[1]
    # Clipping is part of the step's graph: the run compiles what it did without it (the demo's 2) and reads
    # nothing from the device for it.
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    assert sharded["recompilations"] == 0


@pytest.mark.slow
@pytest.mark.machinery
def test_a_norm_of_0_turns_clipping_off(tmp_path):
    norms, report = norms_and_report(tmp_path / "off", "--max_grad_norm", "0")
    assert norms == [] and report["config"]["max_grad_norm"] == 0


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_norm_is_one_line(value):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(max_grad_norm=value)
    assert str(refused.value) == f"max_grad_norm={value!r}: must be 0 (no clipping) or a positive number"
