"""plan.py: what a run needs per chip, from the model's config alone (the default models at their real size, torch_xla
hidden); --compile's figures from the TPU's own compiler on a narrowed model; bad input; and a run that would not fit
stopping before its first compile.

The estimate against the compiler at the default models' real size is the benchmark group "plan against the TPU
compiler" (benchmarks/test_plan_accuracy.py): minutes a row.
"""

import importlib.util
import json
from dataclasses import replace

import pytest
import torch
from conftest import PROJECT, QUICK, TASK, child_env, load_script, python_code, python_command, run

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
    assert lines[0].startswith("Plan: ") and "16 x 128 per device" in lines[0], lines[0]
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
        # The step is the slower of its two bounds, the roofline counted here (no --compile); the hours add the
        # evaluations (one an epoch) and the compiles (assumed, and said so).
        step, run_ = target["step"], target["run"]
        assert step["seconds"] == max(step["mfu_seconds"], step["roofline_seconds"]) > 0
        assert step["roofline_from"].startswith("counted bytes") and run_["compile_from"].startswith("assumed")
        assert run_["evaluations"] == 3 and run_["evaluation_seconds"] > 0
        assert run_["hours"] * 3600 == pytest.approx(
            run_["optimizer_steps"] * step["seconds"] + run_["evaluation_seconds"] + run_["compile_seconds"])
    # A v6e has twice a v5e's memory for the same step: a larger batch fits; eight chips share the epoch's steps.
    v5e, v6e = report["targets"]["v5e-8"], report["targets"]["v6e-8"]
    assert v6e["estimate"]["largest_batch"] > 2 * v5e["estimate"]["largest_batch"]
    assert report["targets"]["v5e-1"]["run"]["optimizer_steps"] > 7 * v5e["run"]["optimizer_steps"]
    assert any(line.startswith("fits") and line.split()[1:] == ["yes"] * 3 for line in lines)


def test_fsdp_splits_the_state_over_the_chips_and_checkpointing_keeps_less(tmp_path):
    report = tmp_path / "plan.json"
    plan("--model_name_or_path", str(config_folder(tmp_path / "model")), "--tpu", "v5e-8", "--parallelism", "fsdp",
         "--mixed_precision", "bf16", "--pure_bf16", "no", "--gradient_checkpointing", "--report", str(report),
         "--max_steps", "25", "--eval_steps", "10")
    target = json.loads(report.read_text())["targets"]["v5e-8"]
    # 25 steps end the run inside its first epoch (128 examples a step): one evaluation at its end, two at steps 10, 20.
    assert (target["run"]["optimizer_steps"], target["run"]["evaluations"]) == (25, 3)
    parts, parameters = target["estimate"]["parts"], DEFAULTS[TASK][2]
    # Every weight split along its first dimension, a short last shard padded (a 2-label head: a row of 8).
    assert 4 * parameters / 8 <= parts["weights"] < 4 * parameters / 8 + 2 ** 16
    assert parts["activations"] == target["estimate"]["activations_checkpointed"]


@pytest.mark.parametrize(("args", "said"), [
    (["--tpu", "v7x-8"], "tpu='v7x-8': not a TPU slice this plan knows; known: v4-8,"),
    (["--tpu", "tpu7x-6"], "tpu='tpu7x-6': not a TPU slice this plan knows"),
    (["--model_name_or_path", "MODEL", "--max_seq_length", "100000"], "max_seq_length=100000: past the "),
    (["--eval_examples", "0"], "eval_examples=0: a number of examples, at least 1"),
    (["--tpu", "v5e-3"], "tpu='v5e-3': not a TPU slice"),
    (["--model_name_or_path", "./no-such-model"], "model_name_or_path='./no-such-model': no such folder"),
    (["--mfu", "1.5"], "mfu=1.5: a share of the chip's peak"),
    (["--train_batch_size", "0"], "train_batch_size"),
    (["--compile_cache", "/dev/null"], "compile_cache=/dev/null: not a folder"),
])
def test_bad_input_is_one_line_naming_the_field_and_writes_nothing(tmp_path, args, said):
    report = tmp_path / "plan.json"
    if "MODEL" in args:  # the default architecture's config, at its real size
        args = [str(config_folder(tmp_path / "model")) if arg == "MODEL" else arg for arg in args]
    result = plan("--report", str(report), *args, check=False)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr.strip().splitlines()[-1], result.stderr
    assert not report.exists()


def test_the_chip_table_states_its_units_and_sells_hosts_as_google_does():
    """Usable HBM never above the published figure (v5p's libtpu figure, 95.74 GiB, is held to the published 95); an
    8-chip v5e or v6e slice is one host, larger ones hosts of 4; a TPU7x chip is two devices, its names count them."""
    from {{ cookiecutter.project_slug }}.planning import targets

    for chip in targets.CHIPS.values():
        assert 0 < chip.usable_hbm_bytes <= chip.hbm_bytes, chip.generation
    v5e8, v6e8, v5e16, v5p8, tpu7x8, tpu7x2 = targets.parse("v5e-8,v6e-8,v5litepod-16,v5p-8,tpu7x-8,tpu7x-2")
    assert (v5e8.chips_per_host, v5e8.topology()) == (8, ("v5e:2x4", (2, 4, 1)))
    assert (v6e8.chips_per_host, v6e8.topology()) == (8, ("v6e:2x4", (2, 4, 1)))
    assert (v5e16.chips_per_host, v5e16.topology()) == (4, ("v5e:4x4", (2, 2, 1)))
    assert (v5p8.chips, v5p8.devices, v5p8.topology()) == (4, 4, ("v5:2x2x1", (2, 2, 1)))
    assert (tpu7x8.chips, tpu7x8.devices, tpu7x8.topology()) == (4, 8, ("tpu7x:2x2x1", (2, 2, 1)))
    assert (tpu7x2.chips, tpu7x2.devices, tpu7x2.chips_per_host) == (1, 2, 1)
    # A TPU7x device is half a chip: 2,307 TFLOP/s and 192 GiB a chip, as Google publishes them.
    assert tpu7x8.chip.peak_bf16_flops * 2 == 2307e12 and tpu7x8.chip.hbm_bytes * 2 == 192 * GIB
    if importlib.util.find_spec("libtpu"):  # the plan extra: libtpu lays the slice out as the table says
        from {{ cookiecutter.project_slug }}.xla.tpu_compile import topology_devices

        for target, hosts in ((v5e8, 1), (v6e8, 1), (v5e16, 4)):
            devices = topology_devices(*target.topology())
            assert len(devices) == target.chips and len({device.process_index for device in devices}) == hosts


def test_tpu7x_has_estimate_rows_and_says_why_its_compiler_cannot_answer(tmp_path):
    """TPU7x beside v5e: figures per device (two a chip), no list price (the cost asks for one); --compile for TPU7x
    alone compiles nothing and says why, exit 0."""
    report = tmp_path / "plan.json"
    result = plan("--model_name_or_path", str(config_folder(tmp_path / "model")), "--tpu", "tpu7x-8,v5e-4",
                  "--report", str(report))
    target = json.loads(report.read_text())["targets"]["tpu7x-8"]
    assert (target["chips"], target["devices"], target["fits"]) == (4, 8, True)
    assert target["run"]["cost"] is None and "give --price_per_chip_hour" in target["run"]["price_source"]
    rows = {line.split("  ")[0]: line.split() for line in result.stdout.splitlines()}
    assert rows["chips (devices)"][-3:] == ["4", "(8)", "4"] and rows["cost, USD"][2:5] == ["-", "(no", "price)"]
    if importlib.util.find_spec("libtpu"):
        result = plan("--model_name_or_path", str(tmp_path / "model"), "--tpu", "tpu7x-8", "--compile",
                      "--report", str(report))
        assert "compiling the step" not in result.stdout and json.loads(report.read_text())["targets"]["tpu7x-8"]["compiler"] is None
        assert "tpu7x-8: the TPU compiler here cannot answer: libtpu 0.0.21, the release torch_xla 2.9 pins, " \
            "refuses TPU7x" in result.stdout, result.stdout


def mixture_of_experts(folder):
    """A tiny Mixtral: an architecture the estimate has no formula for."""
    import transformers

    transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=2, num_local_experts=4,
                               max_position_embeddings=128, pad_token_id=0).save_pretrained(folder)
    return folder


def test_an_architecture_without_a_formula_is_not_estimated_but_its_state_is_counted(tmp_path):
    """A mixture of experts (Mixtral's shape): no peak, no "fits", no largest batch, and the line saying why;
    the weights and moments are still exact, and a run holds them alone to the device."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import start_check
    from {{ cookiecutter.project_slug }}.tasks import task

    mixture_of_experts(tmp_path / "model")
    report = tmp_path / "plan.json"
    result = plan("--model_name_or_path", str(tmp_path / "model"), "--tpu", "v5e-1", "--report", str(report))
    target = json.loads(report.read_text())["targets"]["v5e-1"]
    assert target["estimate"]["peak_bytes"] is None and target["fits"] is None
    assert target["estimate"]["largest_batch"] is None and target["estimate"]["parts"]["weights"] > 0
    assert "v5e-1: no estimate of the peak: mixtral is a mixture of experts, which the estimate has no formula " \
        "for: compile to know (--compile)" in result.stdout, result.stdout
    assert any(line.split()[1:] == ["compile", "to", "know"] for line in result.stdout.splitlines() if line.startswith("fits"))
    config = TrainConfig(model_name_or_path=str(tmp_path / "model"))
    recipe = recipe_of(config, task)
    model = run_model(config, recipe)
    (line,), problem = start_check.check_at_start(model, recipe, 1, 2 ** 30)
    assert problem is None and line.startswith("plan: no estimate of the peak (mixtral is a mixture of experts"), line
    (line,), problem = start_check.check_at_start(model, recipe, 1, 1024)
    assert problem.startswith("train_batch_size=") and "the weights and optimizer state alone need" in problem


@pytest.mark.slow
def test_the_tpu_compiler_answers_for_an_architecture_without_a_formula(tmp_path):
    """--compile on the tiny Mixtral: the compiler's peak, where the estimate has none (its experts as batched matrix
    products: models/modeling.py)."""
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    report = tmp_path / "plan.json"
    plan("--model_name_or_path", str(mixture_of_experts(tmp_path / "model")), "--tpu", "v5e-1", "--compile",
         "--max_seq_length", "32", "--compile_cache", str(tmp_path / "cache"), "--report", str(report))
    target = json.loads(report.read_text())["targets"]["v5e-1"]
    assert target["estimate"]["peak_bytes"] is None and target["compiler"]["estimate_over_compiler"] is None
    assert target["compiler"]["fits"] is True and target["compiler"]["peak_bytes"] > target["estimate"]["parts"]["weights"]
    assert target["step"]["roofline_seconds"] == target["compiler"]["roofline_step_seconds"]


def test_the_matrix_table_is_its_results_file_s_and_every_out_of_sample_row_holds(tmp_path):
    """docs/plan.md's table of the group "plan against the TPU compiler" is the one docs/plan-matrix.json gives (the
    reference run, committed); every out-of-sample row is within 15 % of the compiler's peak with its `fits`, or not
    estimated with the plan's reason; the matrix spans what it says; and the file's estimates for this task's rows are
    today's code's (recomputed from each row's config and flags: a change to the estimate shows here)."""
    import transformers

    from {{ cookiecutter.project_slug }}.plan_cli import make_plan, parse

    plan_matrix = load_script("plan_matrix")
    held = plan_matrix.held_block((PROJECT / "docs" / "plan.md").read_text())
    assert held is not None and held.strip() == plan_matrix.block().strip(), "python scripts/plan_matrix.py --write docs/plan.md"
    rows = json.loads(plan_matrix.RESULTS.read_text())["rows"]
    checks = [result for result in rows.values() if result["row"]["role"] == "check"]
    for result in checks:
        if result["estimate_peak_gib"] is None:
            assert result["estimate_why"], result["row"]
        else:
            assert abs(result["estimate_over_compiler"] - 1) <= plan_matrix.TOLERANCE, result["row"]
            assert result["estimate_fits"] == result["compiler_fits"], result["row"]
    assert len({result["row"]["model"] for result in checks} - {"bert-base-cased", "Qwen/Qwen2.5-0.5B"}) >= 6
    assert {result["row"]["length"] for result in checks} >= {128, 512, 2048}
    assert {result["target"].split("-")[0] for result in checks} >= {"v5e", "v6e", "v5p"}
    assert {result["row"]["layout"] for result in checks} == {"data", "fsdp"}
    assert {"no"} <= {result["row"]["precision"] for result in checks}
    assert any(result["row"]["lora_r"] for result in checks) and any(result["row"]["checkpointing"] for result in checks)
    from {{ cookiecutter.project_slug }}.planning import start_check

    # The margin a run's start gives the estimate is the one the matrix measured for the task.
    assert plan_matrix.margins({"rows": rows}, start_check.MEASURED_ERROR_FLOOR) == start_check.MEASURED_ERROR
    mine = [result for result in rows.values() if result["task"] == TASK]
    assert mine
    for index, result in enumerate(mine):
        class_name, shape = result["model_config"]
        folder = tmp_path / str(index)
        getattr(transformers, class_name)(**shape).save_pretrained(folder)
        report = make_plan(*parse(["--model_name_or_path", str(folder), *result["plan_flags"]]), say=lambda line: None)
        (target,) = report["targets"].values()
        peak, kept = target["estimate"]["peak_bytes"], result["estimate_peak_gib"]
        assert (peak is None) == (kept is None) and (peak is None or peak / GIB == pytest.approx(kept, rel=1e-9)), (
            f"{result['row']}: the committed estimate is not today's: rerun the plan profile and "
            "python scripts/plan_matrix.py --write docs/plan.md")


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
    plan asked again reads the compiler's answer from its cache instead of compiling; with --steps_per_execution 4
    the call of 4 steps is compiled too."""
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
        # The step's time is bound by the compiler's roofline now, not the counted bytes', and never shorter than it.
        assert target["step"]["roofline_seconds"] == compiler["roofline_step_seconds"] <= target["step"]["seconds"]
        assert "compiler" in target["step"]["roofline_from"] and "compiler" in target["run"]["compile_from"]
        # The evaluation compiled beside the step, at the run's own batch (the train batch: none given here).
        evaluation = compiler["evaluation"]
        assert evaluation["fits"] is True and compiler["step_fits"] is True, (layout, evaluation)
        assert evaluation["batch_per_chip"] == target["evaluation"]["batch_per_chip"] == 16, evaluation
        assert evaluation["compile_seconds"] > 0 and evaluation["peak_bytes"] > 0
        assert target["run"]["compile_seconds"] == compiler["compile_seconds"] + evaluation["compile_seconds"]
        assert target["run"]["compile_from"] == "the TPU compiler's for the training step and the evaluation"
    assert plans["fsdp"]["compiler"]["parts"]["arguments"] < plans["data"]["compiler"]["parts"]["arguments"] / 2
    # The data layout's answer is kept for a run of the same recipe on that slice, fsdp's not (it overstates the run's).
    from {{ cookiecutter.project_slug }}.plan_cli import parse, recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import rehearsed
    from {{ cookiecutter.project_slug }}.tasks import task

    for layout in ("data", "fsdp"):
        config, _ = parse(["--model_name_or_path", str(folder), "--parallelism", layout, "--max_seq_length", "32"])
        recipe = recipe_of(config, task)
        found = rehearsed.lookup(tmp_path / "cache", rehearsed.recipe_key(run_model(config, recipe), recipe, config),
                                 "v5e", 4)
        if layout == "data":
            assert found["source"] == "compile" and found["largest_peak_bytes"] == plans["data"]["compiler"]["peak_bytes"]
        else:
            assert found is None
    again = compiled("fsdp")["compiler"]
    assert again["cached"].startswith(str(tmp_path / "cache"))
    # --steps_per_execution 4: the call of 4 steps compiled beside one step's, its peak holding 4 batches.
    several = compiled("data", "--steps_per_execution", "4", "--logging_steps", "8")["compiler"]
    calls = several["several_steps"]
    assert calls["steps_per_call"] == 4 and calls["fits"] is None and calls["compile_seconds"] > 0
    assert several["peak_bytes"] < calls["peak_bytes"], (several["peak_bytes"], calls)
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
def test_a_step_that_fits_beside_an_evaluation_that_does_not_is_no_fit_and_a_run_of_it_stops(tmp_path):
    """The case a Llama-3.1-8B rehearsal met at 4 x 1,024 a chip on a v5e-8, at a small size: the step fits, the
    evaluation (16,384 rows of 512 tokens a chip: its attention scores alone 17 GiB) does not. --compile says NO for
    the slice and why, keeps the evaluation's peak as the recipe's answer, and a run of that recipe stops at its start."""
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    folder = config_folder(tmp_path / "model", {**TINY, "max_position_embeddings": 512})
    flags = ["--model_name_or_path", str(folder), "--parallelism", "data", "--max_seq_length", "512",
             "--eval_batch_size", "16384"]
    report = tmp_path / "plan.json"
    result = plan(*flags, "--tpu", "v5e-4", "--compile", "--compile_cache", str(tmp_path / "cache"),
                  "--report", str(report))
    compiler = json.loads(report.read_text())["targets"]["v5e-4"]["compiler"]
    assert compiler["step_fits"] is True and compiler["evaluation"]["fits"] is False and compiler["fits"] is False
    assert compiler["evaluation"]["said"].startswith("Used ") and compiler["evaluation"]["peak_bytes"] > 15.75 * GIB
    assert [line.split()[-2:] for line in result.stdout.splitlines() if line.startswith("compiler: fits")] == [
        ["NO", "(evaluation)"]], result.stdout
    from {{ cookiecutter.project_slug }}.plan_cli import parse, recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import rehearsed, start_check
    from {{ cookiecutter.project_slug }}.tasks import task

    config, _ = parse(flags)
    recipe = recipe_of(config, task)
    model = run_model(config, recipe)
    found = rehearsed.lookup(tmp_path / "cache", rehearsed.recipe_key(model, recipe, config), "v5e", 4)
    assert found["largest"] == "the JAX evaluation" and found["fits"] is False
    assert found["largest_peak_bytes"] == compiler["evaluation"]["peak_bytes"]
    lines, problem = start_check.check_at_start(model, recipe, 4, int(15.75 * GIB), found, eval_batch=16384)
    assert "the JAX evaluation" in lines[0], lines
    assert problem.startswith(f"eval_batch_size=16384: the evaluation needs {found['largest_peak_bytes'] / GIB:.2f} GiB "
                              "per chip (compiled), more than the 15.75 GiB this device offers"), problem
    # What it names would fit, by the compiler's own answer.
    rows = problem.split("what would fit: --eval_batch_size ")[1].split()[0]
    assert 8192 < int(rows) < 16384, problem
    again = tmp_path / "again.json"
    plan(*flags[:-1], rows, "--tpu", "v5e-4", "--compile", "--compile_cache", str(tmp_path / "cache"), "--report",
         str(again))
    compiler = json.loads(again.read_text())["targets"]["v5e-4"]["compiler"]
    assert compiler["evaluation"]["batch_per_chip"] == int(rows) and compiler["fits"] is True, compiler["evaluation"]


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
    assert "what would fit: " in said and "a chip with more memory (v4, v5e, v5p, v6e, tpu7x)" in said
    assert "plan: " in result.stdout and "compil" not in result.stdout.lower()
    assert not output.exists()


def test_the_run_checks_its_estimate_against_the_chip_warns_within_the_measured_error_and_stops_past_it(tmp_path):
    """check_at_start on the default model's shape: silent where the estimate fits, a warning naming what would fit
    where it exceeds the chip's memory by less than the margin, a stop with the largest per-chip batch that does fit
    past it."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import estimate, start_check
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(model_name_or_path=str(config_folder(tmp_path / "model")))
    # 64 a chip: below the margin the weights, moments and gradients still fit, the activations do not.
    recipe = replace(recipe_of(config, task), per_chip_batch=64)
    model = run_model(config, recipe)
    plain = estimate.memory(model, recipe, 1)
    # On a chip too small for it, the least the compiler could keep (every activation it may recompute, recomputed).
    least = estimate.memory(model, recipe, 1, usable_bytes=1)["peak_bytes"]
    assert least < plain["peak_bytes"] and plain["recomputed"] == 0
    margin = start_check.MEASURED_ERROR[TASK]
    at_most = least / (1 + margin)  # the smallest chip the estimate may exceed by the margin
    for device_bytes in (None, plain["peak_bytes"]):
        lines, problem = start_check.check_at_start(model, recipe, 1, device_bytes)
        assert problem is None and len(lines) == 1 and lines[0].startswith("plan: "), (device_bytes, lines)
    lines, problem = start_check.check_at_start(model, recipe, 1, int(at_most) + 2 ** 20)
    assert problem is None and len(lines) == 2, lines
    assert lines[1].startswith("warning: the estimate is ") and f"inside its measured error ({margin:.0%})" in lines[1], lines[1]
    assert "what would fit: --train_batch_size " in lines[1] and "--gradient_checkpointing" in lines[1], lines[1]
    device_bytes = int(at_most) - 2 ** 20
    lines, problem = start_check.check_at_start(model, recipe, 1, device_bytes)
    assert lines[0].startswith("plan: ") and problem and "--gradient_checkpointing" in problem
    batch = int(problem.split("--train_batch_size ")[1].split(";")[0])
    assert 0 < batch < recipe.per_chip_batch
    assert estimate.memory(model, replace(recipe, per_chip_batch=batch), 1, device_bytes)["peak_bytes"] <= device_bytes
    assert estimate.memory(model, replace(recipe, per_chip_batch=batch + 1), 1, device_bytes)["peak_bytes"] > device_bytes


def test_what_would_fit_offers_no_recipe_the_estimate_has_no_figure_for(tmp_path):
    """Past the chip at 256 tokens in the data layout over 8 chips: fsdp there has no estimate when the model has
    dropout (estimate.no_formula), so it is not offered as what would fit; a smaller batch is."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import estimate, start_check
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(model_name_or_path=str(config_folder(tmp_path / "model")), max_seq_length=256)
    recipe = replace(recipe_of(config, task), per_chip_batch=256, layout="data")
    model = run_model(config, recipe)
    device = 12 * GIB  # the state fits, the batch does not
    fsdp = estimate.memory(model, replace(recipe, layout="fsdp"), 8, device)["peak_bytes"]
    assert (fsdp is None) == estimate.has_dropout(model.config)  # BERT's dropout; Qwen2 has none
    _, problem = start_check.check_at_start(model, recipe, 8, device)
    assert problem and "what would fit: --train_batch_size " in problem, problem
    assert ("--parallelism fsdp" in problem) == (fsdp is not None and fsdp <= device), problem


def test_a_kept_rehearsal_of_the_same_recipe_replaces_the_estimate_at_the_start_without_a_margin(tmp_path):
    """plan.py --rehearse keeps each slice's answer (planning/rehearsed.py); a run of the same recipe on that slice
    reads it and stops on the TPU compiler's peak, above the chip at all (no margin: not an estimate). Another recipe
    (one more example a chip) or another slice finds none. A device that reports no memory is held to the chip table."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.plan_cli import recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import estimate, rehearsed, start_check, targets
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
    assert estimate.memory(model, recipe, 4)["peak_bytes"] <= usable
    assert start_check.check_at_start(model, recipe, 4, usable)[1] is None
    (line,), problem = start_check.check_at_start(model, recipe, 4, usable, found)
    assert "(rehearsed: the TPU compiler's peak, training step, plan.py --rehearse for v5e-4 of " in line, line
    assert problem and "GiB per chip (rehearsed), more than the 15.75 GiB this device offers" in problem, problem
    (line,), problem = start_check.check_at_start(model, recipe, 4, None, {**found, "largest_peak_bytes": usable})
    assert problem is None and "of the 15.75 GiB a v5e chip offers a program (the chip table" in line, line


def test_the_evaluation_s_batch_is_the_run_s_train_batch_unless_given(tmp_path):
    """--eval_batch_size defaults to the run's own train batch per chip (config/defaults.EVAL_BATCH_SIZE says why): a
    plan and a run of --train_batch_size 4 evaluate 4 a chip, and a kept answer's key is the same whether the 4 was
    given or defaulted. Given, it is kept."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.config.defaults import EVAL_BATCH_SIZE
    from {{ cookiecutter.project_slug }}.plan_cli import make_plan, parse, recipe_of, run_model
    from {{ cookiecutter.project_slug }}.planning import rehearsed
    from {{ cookiecutter.project_slug }}.tasks import task

    assert EVAL_BATCH_SIZE is None  # the bake's answers: the eval batch size left at the train batch size
    assert TrainConfig(train_batch_size=4).per_chip_eval_batch(4) == 4
    assert TrainConfig(train_batch_size=4, eval_batch_size=32).per_chip_eval_batch(4) == 32
    demo = TrainConfig()
    assert demo.per_chip_eval_batch(demo.per_chip_train_batch(True, 8)) == 2  # the demo's global 16 over 8 chips
    model = str(config_folder(tmp_path / "model"))
    for given, evaluated in (([], 4), (["--eval_batch_size", "12"], 12)):
        report = make_plan(*parse(["--model_name_or_path", model, "--tpu", "v5e-8", "--train_batch_size", "4", *given]),
                           say=lambda line: None)
        assert report["recipe"]["eval_batch_size"] == evaluated
        assert report["targets"]["v5e-8"]["evaluation"]["batch_per_chip"] == evaluated
    defaulted = TrainConfig(model_name_or_path=model, train_batch_size=4)
    recipe = recipe_of(defaulted, task)
    assert rehearsed.recipe_key(run_model(defaulted, recipe), recipe, defaulted) == rehearsed.recipe_key(
        run_model(defaulted, recipe), recipe, replace(defaulted, eval_batch_size=4))


def test_the_table_prints_small_figures_with_their_digits():
    """A slow step's examples a second and a fast step's milliseconds keep three significant digits, not 0."""
    from {{ cookiecutter.project_slug }}.planning.table import duration, figure

    assert [figure(value) for value in (0.2504, 3.14159, 42.42, 382682.4)] == ["0.25", "3.14", "42.4", "382682"]
    assert [duration(seconds) for seconds in (0.0000123, 0.0123, 0.5, 12.4, 7200)] == [
        "0.0123 ms", "12.3 ms", "500 ms", "12 s", "2 h"]


@pytest.mark.slow
@pytest.mark.machinery
def test_lora_s_frozen_base_in_bf16_is_half_its_bytes_in_the_estimate_and_the_compiler_s_arguments(tmp_path):
    """With LoRA under bf16 autocast the frozen base is held in bf16 (models/lora.py, frozen_to_bf16): the plan's model is
    the run's, so the estimate's weights and the TPU compiler's arguments both count 2 bytes a frozen element, and
    --lora_frozen_float32 gives 4 back. The adapters and their AdamW state stay float32 in both."""
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    from {{ cookiecutter.project_slug }}.plan_cli import parse, recipe_of, run_model
    from {{ cookiecutter.project_slug }}.tasks import task

    folder = config_folder(tmp_path / "model", TINY)
    flags = ["--model_name_or_path", str(folder), "--max_seq_length", "32", "--lora_r", "4", "--mixed_precision",
             "bf16", "--pure_bf16", "no", "--parallelism", "data"]
    found = {}
    for name, extra in (("bf16", []), ("float32", ["--lora_frozen_float32", "true"])):
        config, _ = parse([*flags, *extra])
        model = run_model(config, recipe_of(config, task))
        frozen = [p for p in model.parameters() if not p.requires_grad]
        assert {p.dtype for p in frozen} == {torch.bfloat16 if name == "bf16" else torch.float32}
        assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}
        report = tmp_path / f"{name}.json"
        plan(*flags, *extra, "--tpu", "v5e-1", "--compile", "--compile_cache", str(tmp_path / "cache"),
             "--report", str(report))
        target = json.loads(report.read_text())["targets"]["v5e-1"]
        parts, arguments = target["estimate"]["parts"], target["compiler"]["parts"]["arguments"]
        state = parts["weights"] + parts["optimizer_state"]
        assert state <= arguments <= state + 2 ** 20, (name, arguments, parts)
        found[name] = (parts["weights"], sum(p.numel() for p in frozen))
    (held, elements), (kept, _) = found["bf16"], found["float32"]
    assert kept - held == 2 * elements


@pytest.mark.slow
@pytest.mark.machinery("causal-lm")
def test_a_decoder_s_evaluation_compiles_for_a_slice_of_several_chips(tmp_path):
    """--compile of a narrowed Llama with LoRA on a v5e-8 under fsdp: the step and the evaluation both compile and fit.
    Traced with 64-bit integers, the evaluation's forward made libtpu 0.0.21 abort the process on every slice of more
    than one chip (xla/tpu_compile_eval.py says why it is traced with 32-bit ones)."""
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    import transformers

    folder = tmp_path / "model"
    transformers.LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                             num_attention_heads=8, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                             tie_word_embeddings=False).save_pretrained(folder)
    report = tmp_path / "plan.json"
    plan("--model_name_or_path", str(folder), "--tpu", "v5e-8", "--parallelism", "fsdp", "--compile", "--lora_r", "16",
         "--train_batch_size", "4", "--max_seq_length", "1024", "--compile_cache", str(tmp_path / "cache"),
         "--report", str(report))
    compiler = json.loads(report.read_text())["targets"]["v5e-8"]["compiler"]
    assert compiler["step_fits"] is True and compiler["evaluation"]["fits"] is True and compiler["fits"] is True
    assert compiler["evaluation"]["batch_per_chip"] == 4 and compiler["evaluation"]["peak_bytes"] > 0
