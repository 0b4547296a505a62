"""The step a run takes (config/step_function.py). By default (auto) the whole step as one JAX function (xla/jax_step.py)
wherever it can run: it trains at the bake's precision, adds no graph, resumes bit for bit, runs on 4 SPMD devices in
either layout; where it cannot run auto takes the lazy step and says why, and an explicit jax is refused in one line.

Its equivalence to the lazy step (losses and weights, dropout masks, LoRA, shardings) is tests/test_jax_step.py's.
"""

import importlib.util
import json

import pytest
import torch
from comparing import float32_apart, relative
from conftest import (
    PARALLELISM,
    TASK,
    assert_same_weights_and_optimizer_state,
    python_command,
    quick,
    resumed_from_step,
    run,
    spmd_env,
    train,
)
from model_matrix import LENGTH, demo_tokenizer, write_model

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig, step_function
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES
from {{ cookiecutter.project_slug }}.precision.levels import requested_level

# The bake's own level: its XLA bf16 variables (pure_bf16 xla or downcast) take the lazy step by default.
BAKED_LEVEL = requested_level(TrainConfig().precision)
JAX_AT_THE_BAKED_LEVEL = BAKED_LEVEL not in ("pure-bf16-xla", "pure-bf16-downcast")
# Settings the refusals below are asked about, at a level the JAX step takes whatever the bake's.
BASE = {"mixed_precision": "bf16", "pure_bf16": "no"}

# At the bake's precision (bf16 autocast by default), dropout on: as users run it. The default step (auto): the JAX
# one on an XLA device.
JAX_RUN = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--num_epochs", "1",
           "--train_batch_size", "8", "--compilation_cache", "false", "--max_recompilations", "0"]


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("bit for bit", "weights and optimizer state of the JAX step at the bf16 default: resumed from "
                      "step 3 against the uninterrupted run")
def test_the_jax_step_trains_adds_no_graph_and_resumes_bit_for_bit(tmp_path):
    if not JAX_AT_THE_BAKED_LEVEL:
        pytest.skip(f"the bake's {BAKED_LEVEL} takes the lazy step (its resume: tests/test_resume.py)")
    uninterrupted = tmp_path / "uninterrupted"
    run(python_command("--output_dir", str(uninterrupted), *JAX_RUN, "--save_steps", "3", "--keep_checkpoints", "4"))
    report = json.loads((uninterrupted / "report.json").read_text())
    assert report["step_function"] == "jax"
    # The lazy step's graphs are exactly 2 (tests/test_graph_watch.py): one train step, one eval step.
    assert report["xla_compilations"] <= 2 and report["recompilations"] == 0
    traced = report["host_tracing_seconds_per_step"]
    assert set(traced) == {"step", "whole_step", "steady_steps"} and traced["whole_step"] > 0
    first, last = report["evaluations"][0], report["evaluations"][-1]
    assert torch.isfinite(torch.tensor([first["eval_loss"], last["eval_loss"]])).all()

    output = tmp_path / "resumed"
    result = resumed_from_step(uninterrupted, output, 3, *JAX_RUN)
    assert "resume: continuing after epoch 0, step 3 of epoch 1" in result.stdout
    assert_same_weights_and_optimizer_state(output / "checkpoints" / "epoch-1", uninterrupted / "checkpoints" / "epoch-1")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("float32", "evaluations and exported weights of 2 epochs at the pretrained rate: the JAX step "
                      "against the lazy step")
def test_at_the_pretrained_rate_the_jax_step_evaluates_as_the_lazy_step(tmp_path):
    """A model saved with save_pretrained (the default architecture, tiny, dropout off), fine-tuned on the demo's files
    at the bake's pretrained learning rate, float32, by each step: the same evaluations (two programs: their losses
    within float32's bound for the run's steps, tests/comparing.py; the accuracy, a count, exactly, as in
    test_fsdp.py; the perplexity, the loss's exp, within the loss's bound) and the same exported weights: apart by
    under 1e-3 of how far the rate moved them (key biases aside: their gradient is rounding noise, which AdamW moves
    them by in both steps)."""
    from safetensors.torch import load_file

    model = write_model(tmp_path / "model", "Qwen2" if TASK == "causal-lm" else "BERT", demo_tokenizer(), dropout=False)
    reports = {}
    for step in ("jax", "lazy"):
        reports[step], _ = train(
            tmp_path / step, "--model_name_or_path", str(model), "--dataset", "files", "--train_file",
            str(DEMO_FILES["train"]), "--eval_file", str(DEMO_FILES["eval"]), "--max_seq_length", str(LENGTH),
            "--num_epochs", "2", "--mixed_precision", "no", "--checkpoint", "false",
            "--step_function", step, *(["--samples", "0"] if TASK == "causal-lm" else []))
    jax, lazy = reports["jax"], reports["lazy"]
    assert jax["learning_rate"]["first_step"] == TrainConfig().pretrained_learning_rate
    assert (jax["step_function"], lazy["step_function"]) == ("jax", "lazy")
    metric = "eval_perplexity" if TASK == "causal-lm" else "eval_accuracy"
    apart = float32_apart(lazy["learning_rate"]["optimizer_steps"])
    for a, b in zip(jax["evaluations"], lazy["evaluations"], strict=True):
        assert relative(a["eval_loss"], b["eval_loss"]) <= apart, (a, b)
        if TASK == "causal-lm":
            assert relative(a[metric], b[metric]) <= 2 * apart * b["eval_loss"], (a, b)
        else:
            assert a[metric] == b[metric], (a, b)
    start = load_file(model / "model.safetensors")
    ends = {step: load_file(tmp_path / step / "outputs" / "model" / "model.safetensors") for step in reports}
    kept = [name for name in start if not name.endswith(("key.bias", "k_proj.bias")) and name in ends["lazy"]]
    moved = sum(float((ends["lazy"][name] - start[name]).norm()) ** 2 for name in kept) ** 0.5
    apart = sum(float((ends["jax"][name] - ends["lazy"][name]).norm()) ** 2 for name in kept) ** 0.5
    print(f"the steps' weights apart by {apart / moved:.2e} of how far they moved ({moved:.3g})")
    assert len(kept) > 10 and moved > 0 and apart <= 1e-3 * moved, (apart, moved)


@pytest.mark.xla
@pytest.mark.slow
def test_the_default_step_is_the_jax_one_on_four_spmd_devices_in_the_baked_layout(tmp_path):
    """What a default bake's train.py does on a host of 4 chips, started as one process (`python train.py`): the whole
    step as one JAX function, said on its first line; under fsdp the weights and moments stay split over the devices,
    under data (parallel/data_spmd.py) each device holds them whole and a quarter of every batch; no graph added."""
    report, result = train(tmp_path, *quick("--train_batch_size", "4"), env=spmd_env(4))
    if not JAX_AT_THE_BAKED_LEVEL:  # auto takes the lazy step at the bake's level, and says why
        assert report["step_function"] == "lazy" and "pure_bf16" in report["step_function_why"]
        assert "step_function: lazy (auto: the JAX step with pure_bf16=" in result.stdout
        return
    assert "step_function: jax (the whole step as one JAX function)" in result.stdout
    assert report["step_function"] == "jax" and report["step_function_why"] is None
    layout = report["layout"]
    assert layout["parallelism"] == PARALLELISM and layout["devices"] == 4 and report["num_processes"] == 1
    assert report["train_batch"]["global"] == 16 and report["xla_compilations"] <= 2 and report["recompilations"] == 0
    if PARALLELISM == "fsdp":  # the weights and AdamW's moments came back from the JAX function still split
        assert layout["optimizer_bytes_per_device"] < 0.5 * layout["optimizer_bytes"]
        assert layout["parameter_bytes_per_device"] < 0.5 * layout["parameter_bytes"]
    else:
        assert layout["parameter_bytes_by_device"] == [layout["parameter_bytes"]] * 4
    assert "libtpu" not in result.stderr and "TPU_WORKER_HOSTNAMES" not in result.stderr  # jax lowers for the CPU here


ALONE = {"on_xla": True, "layout": "fsdp", "processes": 1}


@pytest.mark.parametrize(("settings", "refusal"), [
    ({"optim": "adafactor"}, "optim=adamw"),
    ({"pure_bf16": "xla"}, "pure_bf16=cast or no"),
])
def test_what_the_jax_step_cannot_do_is_refused(settings, refusal):
    with pytest.raises(ConfigError, match=refusal):
        TrainConfig(step_function="jax", **{**BASE, **settings})
    with pytest.raises(ConfigError, match="step_function='eager': must be one of auto, jax, lazy"):
        TrainConfig(step_function="eager")
    # The same list is plan.py's --compile's: a lazy run's settings are asked too.
    assert list(step_function.whole_step_refusals(TrainConfig(**{**BASE, **settings}))) == [next(iter(settings))]
    # The default, auto, takes the lazy step instead and says why, in the refusal's words.
    auto = TrainConfig(**{**BASE, **settings})
    assert auto.step_function == "auto"
    chosen = step_function.choose(auto, step_function.Found(**ALONE))
    assert (chosen.name, chosen.why.startswith("the JAX step")) == ("lazy", True) and refusal in chosen.why


@pytest.mark.parametrize(("found", "refusal"), [
    ({"layout": "data", "processes": 2}, "parallelism='data' takes one process per host"),
    ({"on_xla": False}, "needs an XLA device"),
])
def test_what_the_run_finds_as_it_prepares_is_refused_too(found, refusal):
    """The refusals loop/preparation.py asks for once the device, the layout and the processes are known."""
    jax = TrainConfig(step_function="jax", **BASE)
    # One process on one host: nothing refused but jax and flax where they are not installed.
    assert set(step_function.whole_step_refusals(jax, step_function.Found(**ALONE))) <= {"jax"}
    with pytest.raises(ConfigError, match=refusal):
        step_function.check(jax, step_function.Found(**{**ALONE, **found}))
    lazy = TrainConfig(step_function="lazy", **BASE)
    chosen = step_function.choose(lazy, step_function.Found(**{**ALONE, **found}))
    assert (chosen.whole, chosen.why, chosen.steps) == (False, None, 1)  # and one step a call: the lazy step's
    # auto, the default: the lazy step, the same reason said
    chosen = step_function.choose(TrainConfig(**BASE), step_function.Found(**{**ALONE, **found}))
    assert not chosen.whole and refusal in chosen.why
    if importlib.util.find_spec("jax") and importlib.util.find_spec("flax"):
        chosen = step_function.choose(TrainConfig(**BASE), step_function.Found(**ALONE))
        assert (chosen.whole, chosen.why, chosen.steps) == (True, None, 1)  # one step a call on XLA:CPU


@pytest.mark.slow
@pytest.mark.machinery
def test_the_jax_step_needs_an_xla_device(run_training):
    """The laptop path (torch_xla absent): refused before training, exit 2."""
    report, result = run_training(*quick(), "--step_function", "jax", xla=False, check=False)
    assert result.returncode == 2 and report is None
    assert "step_function='jax' needs an XLA device" in result.stderr
