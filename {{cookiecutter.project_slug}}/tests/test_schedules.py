"""Learning-rate schedules: a warm-up from 0 and a decay to 0 compile no graph of their own, in either layout and with
every optimizer (AdamW, its Kahan-summed form, Adafactor); --max_steps and --eval_steps keep the graphs; the rates follow transformers' schedules; a bad schedule flag or an unknown flag is one line.

At the pretrained rate (2e-5) and the default weight decay (0.01), a rate below 2.98e-6 makes AdamW's
`1 - lr * weight_decay` exactly 1.0 in float32; torch_xla used to compile that step again, and the first step of a
warm-up (a rate of exactly 0) too. The runs below reach both, with --max_recompilations 0: a new graph stops them.
The training tests are the loop's machinery: they run in the text-classification projects (tests/conftest.py).
"""

from pathlib import Path

import pytest
from conftest import QUICK, child_env, eval_examples, python_command, run, spmd_env, train, train_in_workers

from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import read_progress

# 160 demo examples in global batches of 16: 10 optimizer steps, the last ones below 2.98e-6 once the rate decays.
STEPS = 10
RUN = [*QUICK, "--max_train_examples", str(16 * STEPS), "--learning_rate", "2e-5", "--checkpoint", "false",
       "--export", "false"]
CONSTANT = ["--lr_scheduler_type", "constant"]
WARM_UP_AND_DECAY = {
    "linear": ["--lr_scheduler_type", "linear", "--warmup_steps", "1"],
    "cosine": ["--lr_scheduler_type", "cosine", "--warmup_ratio", "0.1"],
}
KAHAN = ["--mixed_precision", "bf16", "--pure_bf16", "cast", "--kahan_summation", "true"]


def graphs(tmp_path, name, *args, env=None) -> int:
    report, _ = train(tmp_path / name, *RUN, *args, env=env)
    assert report["recompilations"] == 0, report["recompilations"]
    return report["xla_compilations"]


@pytest.fixture(scope="module")
def constant_graphs(tmp_path_factory) -> int:
    """The graphs of the run at a constant rate, which each schedule's run is compared with: trained once."""
    return graphs(tmp_path_factory.mktemp("schedules"), "constant", *CONSTANT)


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.parametrize("schedule", sorted(WARM_UP_AND_DECAY))
def test_warm_up_from_0_and_decay_to_0_compile_what_a_constant_rate_does(tmp_path, constant_graphs, schedule):
    assert graphs(tmp_path, schedule, *WARM_UP_AND_DECAY[schedule]) == constant_graphs


@pytest.mark.slow
@pytest.mark.machinery
def test_the_kahan_optimizer_warms_up_and_decays_in_the_graphs_of_a_constant_rate(tmp_path):
    assert graphs(tmp_path, "linear", *KAHAN, *WARM_UP_AND_DECAY["linear"]) == graphs(tmp_path, "constant", *KAHAN,
                                                                                         *CONSTANT)


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.parametrize("layout", [pytest.param("data"), pytest.param("fsdp", marks=pytest.mark.layout("fsdp"))])
def test_adafactor_warms_up_and_decays_in_the_demo_graphs_with_a_fraction_of_adamw_state(tmp_path, layout):
    """transformers' Adafactor: its step count and decay change every step, and still no graph is added (3 graphs,
    the count a constant rate compiles: it makes its state inside its first step, a graph of its own); its factored state is a small part of AdamW's two moments."""
    env = spmd_env(4) if layout == "fsdp" else None
    report, _ = train(tmp_path, *RUN, "--optim", "adafactor", "--parallelism", layout, *WARM_UP_AND_DECAY["linear"],
                      env=env)
    assert report["xla_compilations"] == 3 and report["recompilations"] == 0
    assert report["learning_rate"]["first_step"] == 0.0 and report["learning_rate"]["after_training"] == 0.0
    adamw_bytes = 2 * 4 * report["parameters"]["trainable"]  # two float32 moments per weight
    devices = 4 if layout == "fsdp" else 1
    assert 0 < report["parameters"]["optimizer_state_bytes_per_device"] < adamw_bytes / devices / 10


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.layout("fsdp")
def test_fsdp_warms_up_and_decays_in_the_graphs_of_a_constant_rate(tmp_path):
    fsdp, env = ["--parallelism", "fsdp"], spmd_env(4)
    assert graphs(tmp_path, "linear", *fsdp, *WARM_UP_AND_DECAY["linear"], env=env) == graphs(
        tmp_path, "constant", *fsdp, *CONSTANT, env=env)


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.workers
def test_two_processes_follow_transformers_cosine_schedule_from_0(tmp_path):
    """The rate of every optimizer step in each of 2 processes: transformers' cosine schedule with 2 warm-up steps,
    counted in optimizer steps (Accelerate steps the wrapped scheduler once per process)."""
    import torch
    from transformers import get_scheduler

    _, _, rates = train_in_workers(tmp_path, 2, *RUN, "--lr_scheduler_type", "cosine", "--warmup_steps", "2",
                                   "--mixed_precision", "no")
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=2e-5)
    reference = get_scheduler("cosine", optimizer, num_warmup_steps=2, num_training_steps=STEPS)
    expected = []
    for _ in range(STEPS):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    assert expected[0] == 0.0 and max(expected) == pytest.approx(2e-5)
    for process in (0, 1):
        assert rates[process] == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.slow
@pytest.mark.machinery
@pytest.mark.parametrize("layout", [pytest.param("data"), pytest.param("fsdp", marks=pytest.mark.layout("fsdp"))])
def test_max_steps_ends_the_run_inside_an_epoch_and_eval_steps_evaluates_inside_epochs_in_the_same_graphs(tmp_path,
                                                                                                           layout):
    """6 steps an epoch: --max_steps 8 stops 2 steps into the second of 4 epochs, where the schedule reaches 0 and the
    last checkpoint is written; --eval_steps 3 evaluates at step 3 besides the ends of epochs 1 (step 6) and 2 (8)."""
    report, _ = train(tmp_path, *QUICK, "--num_epochs", "4", "--max_steps", "8", "--eval_steps", "3", "--export", "false",
                      "--parallelism", layout, env=spmd_env(4) if layout == "fsdp" else None)
    assert report["learning_rate"]["optimizer_steps"] == 8 and report["learning_rate"]["after_training"] == 0.0
    assert (report["epochs"], report["epochs_run"]) == (2, 2)
    assert [(evaluation["epoch"], evaluation["global_step"]) for evaluation in report["evaluations"]] == [
        (1, 3), (1, 6), (2, 8)]
    # Every evaluation counts every eval example once, in the one eval graph; the last one is the report's.
    assert {evaluation["eval_examples_counted"] for evaluation in report["evaluations"]} == {eval_examples(64)}
    assert report["evaluations"][-1]["eval_loss"] == report["eval_loss"]
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    assert report["checkpoint"].endswith("epoch-2")
    # The compilation cache is off by default (test_compilation_cache.py): the report says so, and nothing is written.
    assert report["compilation_cache"] == {"enabled": False} and not (tmp_path / "outputs" / "xla-cache").exists()
    assert read_progress(Path(report["checkpoint"]))["global_step"] == 8


@pytest.mark.workers
@pytest.mark.machinery
def test_constant_with_warmup_climbs_from_0_to_the_rate_and_stays(tmp_path):
    """docs/recipes.md's fourth schedule: the rate each optimizer step used, against the rule computed here by hand."""
    _, _, rates = train_in_workers(tmp_path, 1, *RUN, "--lr_scheduler_type", "constant_with_warmup", "--warmup_steps",
                                   "3")
    assert rates[0] == [2e-5 * (min(step, 3) / 3) for step in range(STEPS)]


@pytest.mark.parametrize(("given", "message"), [
    ({"max_steps": 0}, "max_steps=0: must be a positive whole number"),
    ({"optim": "sgd"}, "optim='sgd': must be one of adamw, adafactor"),
    ({"optim": "adafactor", "kahan_summation": True}, "kahan_summation=True is for optim='adamw' (optimi's AdamW), "
                                                      "not optim='adafactor'"),
    ({"eval_steps": -3}, "eval_steps=-3: must be a positive whole number"),
    ({"lr_scheduler_type": "polynomial"}, "lr_scheduler_type='polynomial': must be one of linear, cosine, constant, "
                                          "constant_with_warmup"),
    ({"warmup_ratio": 1.0}, "warmup_ratio=1.0: must be at least 0 and below 1"),
    ({"warmup_ratio": -0.1}, "warmup_ratio=-0.1: must be at least 0 and below 1"),
    ({"warmup_steps": -1}, "warmup_steps=-1: must be 0 or a positive whole number"),
    ({"warmup_steps": 3, "warmup_ratio": 0.1}, "warmup_steps=3 and warmup_ratio=0.1: give one of the two"),
    ({"lr_scheduler_type": "constant", "warmup_steps": 2}, "lr_scheduler_type='constant' has no warm-up: use "
                                                          "constant_with_warmup, or leave the warm-up out"),
])
def test_a_bad_schedule_is_one_line_naming_the_flag(given, message):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(**given)
    assert str(refused.value) == message


def test_the_warm_up_is_the_ratio_of_the_run_rounded_up_or_the_steps_given():
    assert parse(["--warmup_ratio", "0.1"]).warmup_for(187) == 19
    assert parse(["--warmup_steps", "7"]).warmup_for(187) == 7
    assert parse([]).warmup_for(187) == 0


@pytest.mark.parametrize(("given", "said"), [
    (["--lr", "1e-4"], "unknown option --lr: did you mean --learning_rate?"),
    (["--lr=1e-4"], "unknown option --lr: did you mean --learning_rate?"),
    (["--learnin_rate", "1e-4"], "unknown option --learnin_rate: did you mean --learning_rate?"),
    (["--num_train_epochs", "3"], "unknown option --num_train_epochs: did you mean --num_epochs?"),
    (["--downcast_bf16"], "--downcast_bf16 is no longer an option: use --pure_bf16 downcast"),
])
def test_an_unknown_flag_is_one_line_with_the_closest_known_one_and_nothing_is_written(tmp_path, given, said):
    output = tmp_path / "outputs"
    result = run(python_command("--output_dir", str(output), *given, xla=False), env=child_env(xla=False),
                 check=False, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].endswith(f"error: {said}"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not output.exists()
