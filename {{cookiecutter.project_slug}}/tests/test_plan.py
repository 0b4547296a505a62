"""plan.py: what a run needs per chip, from the model's config alone (the default models at their real size, torch_xla
hidden); --compile's figures from the TPU's own compiler on a narrowed model; bad input; and a run that would not fit
stopping before its first compile.

The estimate against the compiler at the default models' real size is the benchmark group "plan against the TPU
compiler" (benchmarks/test_plan_accuracy.py): minutes a row.
"""

import json
from dataclasses import replace

import pytest
from conftest import QUICK, TASK, child_env, python_code, python_command, run

GIB = 2 ** 30
# The defaults' real shapes, as their config.json on the hub gives them (bert-base-cased, Qwen/Qwen2.5-0.5B), and
# their parameters with the task's head: 108,310,272 + a 2-label classifier (768 x 2 + 2); Qwen2.5-0.5B's 494,032,768
# with its output layer tied to the embeddings.
DEFAULTS = {
    "text-classification": ("BertConfig", {"vocab_size": 28996}, 108_311_810),
    "causal-lm": ("Qwen2Config", {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                                  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                                  "max_position_embeddings": 32768, "tie_word_embeddings": True}, 494_032_768),
}
# A narrowed model compiles for a TPU in seconds; dropout off (BERT's), whose random bits double that.
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 64,
        "max_position_embeddings": 64, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def config_folder(folder, shape: dict | None = None):
    """A folder holding only the default architecture's config.json (no weights: the plan never reads any)."""
    import transformers

    name, real, _ = DEFAULTS[TASK]
    getattr(transformers, name)(**(shape or real)).save_pretrained(folder)
    return folder


def plan(*args, xla: bool = False, check: bool = True):
    return run(python_command(*args, module="plan", xla=xla), env=child_env(xla), check=check, timeout=600)


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    report = folder / "plan.json"
    # The data layout and float32 weights under bf16 autocast, whatever the bake's answers: each chip holds the whole
    # state in 4 bytes a weight (fsdp's split is the next test's).
    result = plan("--model_name_or_path", str(config_folder(folder / "model")), "--tpu", "v5e-1,v5e-8,v6e-8",
                  "--parallelism", "data", "--mixed_precision", "bf16", "--pure_bf16", "no", "--report", str(report))
    return result, json.loads(report.read_text())


def test_the_default_model_at_its_real_size_fits_each_slice_without_torch_xla(default_plan):
    """torch_xla hidden (a laptop): the table per chip for three slices side by side, and the same in the report."""
    result, report = default_plan
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Plan: ") and "16 x 128 per chip" in lines[0], lines[0]
    header = lines[1].split()
    assert header == ["v5e-1", "v5e-8", "v6e-8"]
    parameters = DEFAULTS[TASK][2]
    for name, target in report["targets"].items():
        parts = target["estimate"]["parts"]
        # float32 weights (bf16 autocast keeps them), their gradients, AdamW's two moments: exact, whole per chip.
        assert parts["weights"] == parts["gradients"] == 4 * parameters, name
        assert parts["optimizer_state"] == 8 * parameters
        # The activations are gone by the clip, which needs every gradient: the peak holds the larger of the two.
        assert target["estimate"]["peak_bytes"] == parts["weights"] + parts["optimizer_state"] + max(
            parts["gradients"], parts["activations"])
        assert target["fits"] is True and target["estimate"]["largest_batch"] > 16
        assert target["compiler"] is None  # no --compile
        assert target["run"]["cost"] == pytest.approx(target["run"]["chip_hours"] * target["run"]["price_per_chip_hour"])
    # A v6e has twice a v5e's memory for the same step: a larger batch fits; eight chips share the epoch's steps.
    v5e, v6e = report["targets"]["v5e-8"], report["targets"]["v6e-8"]
    assert v6e["estimate"]["largest_batch"] > 2 * v5e["estimate"]["largest_batch"]
    assert report["targets"]["v5e-1"]["run"]["optimizer_steps"] > 7 * v5e["run"]["optimizer_steps"]
    assert any(line.startswith("fits") and line.split()[1:] == ["yes"] * 3 for line in lines)


def test_fsdp_splits_the_state_over_the_chips_and_checkpointing_keeps_less(tmp_path):
    report = tmp_path / "plan.json"
    plan("--model_name_or_path", str(config_folder(tmp_path / "model")), "--tpu", "v5e-8", "--parallelism", "fsdp",
         "--mixed_precision", "bf16", "--pure_bf16", "no", "--gradient_checkpointing", "--report", str(report))
    target = json.loads(report.read_text())["targets"]["v5e-8"]
    parts, parameters = target["estimate"]["parts"], DEFAULTS[TASK][2]
    # Every weight split along its first dimension, a short last shard padded (a 2-label head: a row of 8).
    assert 4 * parameters / 8 <= parts["weights"] < 4 * parameters / 8 + 2 ** 16
    assert parts["activations"] == target["estimate"]["activations_checkpointed"]


@pytest.mark.parametrize(("args", "said"), [
    (["--tpu", "v7x-8"], "tpu='v7x-8': not a TPU slice this plan knows; known: v4-8,"),
    (["--tpu", "v5e-3"], "tpu='v5e-3': not a TPU slice"),
    (["--model_name_or_path", "./no-such-model"], "model_name_or_path='./no-such-model': no such folder"),
    (["--mfu", "1.5"], "mfu=1.5: a share of the chip's peak"),
    (["--train_batch_size", "0"], "train_batch_size"),
    (["--compile_cache", "/dev/null"], "compile_cache=/dev/null: not a folder"),
])
def test_bad_input_is_one_line_naming_the_field_and_writes_nothing(tmp_path, args, said):
    report = tmp_path / "plan.json"
    result = plan("--report", str(report), *args, check=False)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr.strip().splitlines()[-1], result.stderr
    assert not report.exists()


def test_compile_without_the_plan_extra_says_how_to_install_it(tmp_path):
    """libtpu hidden, as on a machine without the plan extra: one line, exit 2, nothing compiled or written."""
    code = """
import sys
sys.modules["libtpu"] = None
from {{ cookiecutter.project_slug }}.plan_cli import main
main(sys.argv[1:])
"""
    report = tmp_path / "plan.json"
    result = run(python_code(code, "--model_name_or_path", str(config_folder(tmp_path / "model", TINY)), "--compile",
                             "--report", str(report), xla=False), env=child_env(xla=False), check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: compile: libtpu not installed: pip install -e '.[plan]' -c constraints.txt")
    assert not report.exists()


@pytest.mark.slow
@pytest.mark.machinery
def test_the_tpu_compiler_checks_a_narrowed_model_in_both_layouts(tmp_path):
    """--compile on a 1-layer model 32 wide (seconds a slice): the compiler's arguments are the estimate's weights
    and AdamW moments (a few tiles of padding apart), four chips under fsdp each hold a quarter of them, and the same
    plan asked again reads the compiler's answer from its cache instead of compiling."""
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    folder = config_folder(tmp_path / "model", TINY)

    def compiled(layout: str, *flags) -> dict:
        report = tmp_path / f"{layout}{len(flags)}.json"
        run(python_command("--model_name_or_path", str(folder), "--tpu", "v5e-4", "--parallelism", layout,
                           "--compile", "--max_seq_length", "32", "--report", str(report),
                           "--compile_cache", str(tmp_path / "cache"), *flags, module="plan"))
        return json.loads(report.read_text())["targets"]["v5e-4"]

    plans = {layout: compiled(layout) for layout in ("data", "fsdp")}
    for layout, target in plans.items():
        compiler, parts = target["compiler"], target["estimate"]["parts"]
        # Both programs span the slice (one process drives the chips); the data layout's weights are whole on each.
        assert compiler["fits"] is True and compiler["compile_seconds"] > 0, layout
        assert compiler["chips"] == 4
        assert "cached" not in compiler
        state = parts["weights"] + parts["optimizer_state"]
        assert state <= compiler["parts"]["arguments"] <= state + 2 ** 20, (layout, compiler["parts"], parts)
        # Donated: the new weights and moments are written over the old ones.
        assert compiler["parts"]["aliased"] >= state
        assert compiler["flops"] > 0 and compiler["roofline_step_seconds"] > 0
    assert plans["fsdp"]["compiler"]["parts"]["arguments"] < plans["data"]["compiler"]["parts"]["arguments"] / 2
    again = compiled("fsdp")["compiler"]
    assert again["cached"].startswith(str(tmp_path / "cache"))
    assert {**again, "cached": None} == {**plans["fsdp"]["compiler"], "cached": None}
    # Two micro-batches scanned, each layer under jax.checkpoint: the compiler counts the scan's body once (one
    # micro-batch of the same per-chip size, its forward run twice: more FLOPs than the plain step's), and the
    # roofline is that body's time twice.
    plain, both = plans["fsdp"]["compiler"], compiled("fsdp", "--gradient_accumulation_steps", "2",
                                                       "--gradient_checkpointing", "true")["compiler"]
    assert both["micro_batches"] == 2 and both["fits"] is True and "cached" not in both
    assert both["flops"] > 1.2 * plain["flops"], (both["flops"], plain["flops"])
    assert both["roofline_step_seconds"] > 2 * plain["roofline_step_seconds"]


@pytest.mark.slow
@pytest.mark.machinery
def test_a_run_that_would_not_fit_stops_before_its_first_compile(tmp_path):
    """The device says it offers 1 MiB a chip (the test sets it: XLA:CPU reports none): the run stops before anything
    reaches the device, one line naming what would fit, exit 2, its output folder gone."""
    output = tmp_path / "outputs"
    code = """
import sys
from {{ cookiecutter.project_slug }}.xla import device
device.memory_per_chip = lambda device: 2 ** 20
from {{ cookiecutter.project_slug }}.cli import main
main(sys.argv[1:])
"""
    result = run(python_code(code, *QUICK, "--output_dir", str(output)), check=False)
    assert result.returncode == 2, result.stderr
    said = result.stderr.strip().splitlines()[-1]
    assert said.startswith("error: train_batch_size=") and "more than the 0.00 GiB this device offers" in said, said
    assert "what would fit: " in said and "a chip with more memory (v4, v5e, v5p, v6e)" in said
    assert "plan: " in result.stdout and "compil" not in result.stdout.lower()
    assert not output.exists()


def test_the_run_checks_its_estimate_against_the_chip_with_the_measured_error_as_margin(tmp_path):
    """check_at_start on the default model's shape: silent where the estimate fits and within the margin above the
    chip's memory, stopping past the margin with the largest per-chip batch that does fit."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import estimate
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(model_name_or_path=str(config_folder(tmp_path / "model")))
    # 64 a chip: below the margin the weights, moments and gradients still fit, the activations do not.
    recipe = replace(recipe_of(config, task), per_chip_batch=64)
    model = run_model(config, recipe)
    plain = estimate.memory(model, recipe, 1)
    # On a chip too small for it, the least the compiler could keep (every activation it may recompute, recomputed).
    least = estimate.memory(model, recipe, 1, usable_bytes=1)["peak_bytes"]
    assert least < plain["peak_bytes"] and plain["recomputed"] == 0
    at_most = least / (1 + estimate.MEASURED_ERROR)  # the smallest chip the estimate may exceed by the margin
    for device_bytes in (None, plain["peak_bytes"], int(at_most) + 2 ** 20):
        assert estimate.check_at_start(model, recipe, 1, device_bytes)[1] is None, device_bytes
    device_bytes = int(at_most) - 2 ** 20
    line, problem = estimate.check_at_start(model, recipe, 1, device_bytes)
    assert line.startswith("plan: ") and problem and "--gradient_checkpointing" in problem
    batch = int(problem.split("--train_batch_size ")[1].split(";")[0])
    assert 0 < batch < recipe.per_chip_batch
    assert estimate.memory(model, replace(recipe, per_chip_batch=batch), 1, device_bytes)["peak_bytes"] <= device_bytes
    assert estimate.memory(model, replace(recipe, per_chip_batch=batch + 1), 1, device_bytes)["peak_bytes"] > device_bytes


def test_a_kept_rehearsal_of_the_same_recipe_replaces_the_estimate_at_the_start_without_a_margin(tmp_path):
    """plan.py --rehearse keeps each slice's answer (planning/rehearsed.py); a run of the same recipe on that slice
    reads it and stops on the TPU compiler's peak, above the chip at all (no margin: not an estimate). Another recipe
    (one more example a chip) or another slice finds none. A device that reports no memory is held to the chip table."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import estimate, rehearsed, targets
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(model_name_or_path=str(config_folder(tmp_path / "model")))
    recipe = recipe_of(config, task)
    model = run_model(config, recipe)
    key = rehearsed.recipe_key(model, recipe, config)
    assert key == rehearsed.recipe_key(run_model(config, recipe), recipe, config)
    assert key != rehearsed.recipe_key(model, replace(recipe, per_chip_batch=recipe.per_chip_batch + 1), config)
    (target,) = targets.parse("v5e-4")
    usable = target.chip.usable_hbm_bytes
    kept = {"graphs": [{}, {}], "largest_peak_bytes": usable + 1, "largest": "training step", "fits": False,
            "compile_seconds_before_first_step": 1.0, "compile_seconds_whole_run": 2.0, "graphs_after_the_first_epoch": 0}
    rehearsed.record(tmp_path / "cache", key, target, kept)
    found = rehearsed.lookup(tmp_path / "cache", key, "v5e", 4)
    assert found["largest_peak_bytes"] == usable + 1 and found["target"] == "v5e-4" and found["graphs"] == 2
    assert rehearsed.lookup(tmp_path / "cache", key, "v5e", 8) is None
    assert rehearsed.lookup(tmp_path / "cache", key, "v6e", 4) is None
    assert rehearsed.lookup(tmp_path / "cache", key, None, 4) is None
    # The estimate of this recipe fits a v5e chip; the kept answer one byte past it stops the run.
    assert estimate.check_at_start(model, recipe, 4, usable)[1] is None
    line, problem = estimate.check_at_start(model, recipe, 4, usable, found)
    assert "(rehearsed: the TPU compiler's peak, training step, plan.py --rehearse for v5e-4 of " in line, line
    assert problem and "GiB per chip (rehearsed), more than the 15.75 GiB this device offers" in problem, problem
    line, problem = estimate.check_at_start(model, recipe, 4, None, {**found, "largest_peak_bytes": usable})
    assert problem is None and "of the 15.75 GiB a v5e chip offers a program (the chip table" in line, line
