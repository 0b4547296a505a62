"""LoRA (--lora_r): adapters on a frozen base, in both layouts, with the graphs, checkpoints, resume and export of
full fine-tuning.

One data-layout run of 2 epochs (float32, so that "the same" means bit for bit) is shared by the data layout's tests;
one fsdp run of 2 epochs on 2 SPMD devices, accumulating 2 micro-batches per step, checks the sharded layout and its
resume. Each layout's tests run in a
project of that layout (tests/conftest.py).
"""

import json
import shutil

import pytest
import torch
from comparing import BF16_RESOLUTION
from conftest import TASK, quick, spmd_env, train

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST
from {{ cookiecutter.project_slug }}.tasks import task

LORA = ["--lora_r", "4", "--mixed_precision", "no"]
DATA_RUN = quick("--num_epochs", "2", *LORA, "--parallelism", "data", "--merge_lora", "true")
# The fsdp run also accumulates 2 micro-batches per step (--gradient_accumulation_steps): LoRA's sharded resume with it.
FSDP_RUN = quick("--num_epochs", "2", *LORA, "--parallelism", "fsdp", "--export", "false", "--gradient_accumulation_steps", "2")
TRAINED = ("lora_", "modules_to_save")  # what peft names the adapters and the trainable copy of a classifier's head
METRICS = ("eval_loss", "eval_examples_counted", "eval_perplexity" if TASK == "causal-lm" else "eval_accuracy")


@pytest.fixture(scope="module")
def data_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora-data")
    report, _ = train(folder, *DATA_RUN)
    return report, folder / "outputs"


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora-fsdp")
    report, _ = train(folder, *FSDP_RUN, env=spmd_env(2))
    return report, folder / "outputs"


def demo_parts():
    """(tokenizer, eval examples, the demo's base model as built: seeded, untrained) on the host."""
    config = TrainConfig(demo=True, max_seq_length=64)
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=True)
    return tokenizer, eval_examples, task.build_model(config, demo=True, vocab_size=len(tokenizer))


@pytest.mark.xla
@pytest.mark.parametrize("layout", [pytest.param(name, marks=pytest.mark.layout(name)) for name in ("data", "fsdp")])
@pytest.mark.slow
def test_lora_compiles_two_graphs_and_trains_only_the_adapters(request, layout):
    report, _ = request.getfixturevalue(f"{layout}_run")
    # The fsdp run accumulates 2 micro-batches, a scan inside the JAX step's one graph (the lazy step: one graph more,
    # the first micro-batch's, loop/step.py).
    assert report["step_function"] == "jax" and (report["xla_compilations"], report["recompilations"]) == (2, 0)
    counts = report["parameters"]
    assert 0 < counts["trainable"] < counts["total"] / 10
    assert report["lora"]["r"] == 4 and report["lora"]["alpha"] == 8  # alpha defaults to 2 x r
    assert report["lora"]["target_modules"] == (["q_proj", "v_proj"] if TASK == "causal-lm" else ["query", "value"])
    if TASK != "causal-lm":
        assert "classifier" in report["lora"]["modules_to_save"]  # the new head trains too
    # AdamW's state (exp_avg, exp_avg_sq) exists for the trainable elements only, 4 bytes each in float32.
    assert report["layout"]["optimizer_bytes"] == 2 * 4 * counts["trainable"]
    assert counts["optimizer_state_bytes_per_device"] == report["layout"]["optimizer_bytes_per_device"]


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
def test_fsdp_shards_the_adapters_optimizer_state_over_its_devices(data_run, fsdp_run):
    data, _ = data_run
    fsdp, output = fsdp_run
    assert data["parameters"]["trainable"] == fsdp["parameters"]["trainable"]
    assert fsdp["layout"]["optimizer_bytes_by_device"] == [data["layout"]["optimizer_bytes"] // 2] * 2
    # torch.distributed.checkpoint's shards hold the adapters and their optimizer state, not the frozen base.
    import torch.distributed.checkpoint as dcp

    names = dcp.FileSystemReader(str(output / "checkpoints" / "epoch-1" / "sharded")).read_metadata().state_dict_metadata
    weights = [name for name in names if name.startswith("model.")]
    assert weights and all(any(mark in name for mark in TRAINED) for name in weights), weights


@pytest.mark.xla
@pytest.mark.layout("data")
@pytest.mark.slow
def test_the_frozen_base_is_unchanged_and_the_adapters_moved(data_run):
    from safetensors.torch import load_file

    _, output = data_run
    _, _, built = demo_parts()
    base = load_file(output / "model-base" / "model.safetensors")  # written from the trained model's frozen weights
    expected = built.state_dict()
    assert {name for name, _ in built.named_parameters()} <= base.keys() <= expected.keys()
    changed = [name for name in base if not torch.equal(base[name], expected[name])]
    assert not changed, changed
    adapters = load_file(output / "model" / "adapter_model.safetensors")
    lora_b = [tensor for name, tensor in adapters.items() if "lora_B" in name]
    assert lora_b and all(tensor.abs().sum() > 0 for tensor in lora_b)  # peft starts every B at zero


@pytest.mark.xla
@pytest.mark.layout("data")
@pytest.mark.slow
def test_the_checkpoint_holds_only_the_adapters_and_is_a_small_part_of_the_model(data_run):
    _, output = data_run
    folder = output / "checkpoints" / "epoch-2"
    saved = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    assert saved and all(any(mark in name for mark in TRAINED) for name in saved), list(saved)
    model_bytes = (output / "model-base" / "model.safetensors").stat().st_size
    assert (folder / "pytorch_model.bin").stat().st_size < model_bytes / 10


def resume_after_epoch_1(uninterrupted_run, tmp_path, run, env=None) -> dict:
    """The uninterrupted run's own epoch-1 checkpoint, alone in a fresh output_dir, resumed to the end: its report,
    checked to have trained the last epoch only and to end with the uninterrupted run's metrics."""
    expected, uninterrupted = uninterrupted_run
    checkpoints = tmp_path / "outputs" / "checkpoints"
    shutil.copytree(uninterrupted / "checkpoints" / "epoch-1", checkpoints / "epoch-1")
    (checkpoints / LATEST).write_text("epoch-1")
    report, result = train(tmp_path, *run, "--resume", "true", env=env)
    assert "resume: continuing after epoch 1" in result.stdout
    assert report["epochs_run"] == 1
    assert {name: report[name] for name in METRICS} == {name: expected[name] for name in METRICS}
    return report


@pytest.mark.xla
@pytest.mark.layout("data")
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "metrics and adapters with LoRA: resumed after epoch 1 against the "
                      "uninterrupted run")
def test_resumed_from_epoch_1_ends_as_the_uninterrupted_run(data_run, tmp_path):
    """The data layout's checkpoint (adapters and their optimizer state only): metrics and final adapters bit for bit."""
    resume_after_epoch_1(data_run, tmp_path, DATA_RUN)

    def final(output):
        return torch.load(output / "checkpoints" / "epoch-2" / "pytorch_model.bin", map_location="cpu", weights_only=True)

    mine, theirs = final(tmp_path / "outputs"), final(data_run[1])
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "metrics and adapters with LoRA on 2 SPMD devices: resumed after epoch 1 "
                      "against the uninterrupted run")
def test_fsdp_resumed_from_epoch_1_ends_as_the_uninterrupted_run(fsdp_run, tmp_path):
    """The sharded checkpoint (adapters and their optimizer state only) resumes to the uninterrupted run's metrics."""
    resume_after_epoch_1(fsdp_run, tmp_path, FSDP_RUN, env=spmd_env(2))


def test_a_pretrained_model_trains_its_adapters_at_ten_times_the_full_fine_tuning_rate():
    full = TrainConfig()
    assert TrainConfig(lora_r=8).resolved_learning_rate(demo=False) == pytest.approx(
        10 * full.resolved_learning_rate(demo=False))
    assert TrainConfig(lora_r=8, learning_rate=3e-5).resolved_learning_rate(demo=False) == 3e-5  # given: kept
    assert TrainConfig(lora_r=8).resolved_learning_rate(demo=True) == full.resolved_learning_rate(demo=True)


@pytest.mark.xla
@pytest.mark.layout("data")
@pytest.mark.slow
@pytest.mark.compares("float32", "logits on the host: the merged export against the base model with peft's adapters")
def test_the_adapter_export_loads_with_peft_and_the_merged_one_gives_its_logits(data_run):
    import peft

    report, output = data_run
    assert report["exported"] == str(output / "model")
    adapter_config = json.loads((output / "model" / "adapter_config.json").read_text())
    # The demo's base is built from a config: written beside the adapters, and named by them.
    assert adapter_config["base_model_name_or_path"] == str((output / "model-base").resolve())
    auto_peft = peft.AutoPeftModelForCausalLM if TASK == "causal-lm" else peft.AutoPeftModelForSequenceClassification
    adapted = auto_peft.from_pretrained(output / "model").eval()
    merged = task.AUTO_MODEL.from_pretrained(output / "model-merged").eval()
    assert not any("lora" in name for name in merged.state_dict())
    tokenizer, eval_examples, _ = demo_parts()
    batch = task.make_collator(tokenizer, "fixed", 64)([eval_examples[i] for i in range(4)])
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask") if name in batch}
    with torch.no_grad():
        expected, found = adapted(**inputs).logits, merged(**inputs).logits
        untrained = task.AUTO_MODEL.from_pretrained(output / "model-base").eval()(**inputs).logits
    assert torch.allclose(found, expected, atol=1e-5)
    assert not torch.allclose(untrained, expected, atol=1e-5)  # the adapters (and head) changed the outputs


@pytest.mark.parametrize("flags, field", [
    ({"lora_alpha": 16}, "lora_alpha"),
    ({"lora_dropout": 0.1}, "lora_dropout"),
    ({"lora_target_modules": "query"}, "lora_target_modules"),
    ({"merge_lora": True}, "merge_lora"),
    ({"lora_frozen_float32": True}, "lora_frozen_float32"),
    ({"lora_r": 0}, "lora_r"),
    ({"lora_r": 4, "lora_dropout": 1.0}, "lora_dropout"),
    ({"lora_r": 4, "lora_alpha": 0}, "lora_alpha"),
    ({"lora_r": 4, "lora_target_modules": " , "}, "lora_target_modules"),
    ({"lora_r": 4, "merge_lora": True, "export": False}, "merge_lora"),
])
def test_bad_lora_settings_are_config_errors_naming_the_field(flags, field):
    with pytest.raises(ConfigError, match=rf"^{field}"):
        TrainConfig(**flags)


def test_a_target_the_model_lacks_is_a_config_error_listing_its_layers():
    from {{ cookiecutter.project_slug }}.models import lora

    _, _, model = demo_parts()
    with pytest.raises(ConfigError, match=r"^lora_target_modules='no_such_layer': no such layer .* include .*"):
        lora.add_adapters(model, TrainConfig(demo=True, lora_r=4, lora_target_modules="no_such_layer").model)


@pytest.mark.xla
@pytest.mark.parametrize("layout", [pytest.param(name, marks=pytest.mark.layout(name)) for name in ("data", "fsdp")])
@pytest.mark.slow
@pytest.mark.compares("bf16", "logged losses and eval losses with LoRA under bf16 autocast: the frozen base held in bf16 "
                      "against float32 (--lora_frozen_float32)")
def test_under_bf16_the_frozen_base_is_held_in_bf16_and_trains_as_the_float32_one(tmp_path, layout):
    """With LoRA under bf16 autocast the frozen base is held in bf16 (half its bytes), the adapters, a classifier's
    head and their AdamW state in float32; --lora_frozen_float32 keeps the base float32. The two train alike: under
    autocast every matmul reads its weight rounded to bf16 either way, so what moves is what is not a matmul (the
    embedding's rows, which start the residual stream in bf16, the norms' scales, the biases), each rounded once.
    Two programs in bf16: every logged loss and every evaluation's loss within bf16's resolution (measured on the
    causal-LM demo: eval loss 4.841526 against 4.841539 after 38 steps)."""
    flags = quick("--num_epochs", "2", "--lora_r", "4", "--mixed_precision", "bf16", "--pure_bf16", "no",
                  "--parallelism", layout, "--export", "false", "--checkpoint", "false", "--logging_steps", "2")
    runs, said = {}, {}
    for name, extra in (("bf16", []), ("float32", ["--lora_frozen_float32", "true"])):
        (tmp_path / name).mkdir()
        runs[name], result = train(tmp_path / name, *flags, *extra, env=spmd_env(2) if layout == "fsdp" else None)
        said[name] = result.stdout
        losses = [json.loads(line) for line in (tmp_path / name / "outputs" / "metrics.jsonl").read_text().splitlines()]
        runs[name]["logged"] = [line["loss"] for line in losses if "loss" in line]
    held, kept = runs["bf16"], runs["float32"]
    assert (held["lora"]["frozen_dtype"], kept["lora"]["frozen_dtype"]) == ("bfloat16", "float32")
    assert held["lora"]["trainable_dtype"] == kept["lora"]["trainable_dtype"] == "float32"
    assert "lora: the frozen base (" in said["bf16"] and "lora: the frozen base (" not in said["float32"]
    assert held["precision"]["stored"]["weights"] == "float32 trained, the frozen base bf16 (LoRA)"
    # AdamW's state, for the trainable elements only, float32 in both.
    assert held["layout"]["optimizer_bytes"] == kept["layout"]["optimizer_bytes"] == 2 * 4 * held["parameters"]["trainable"]
    assert held["step_function"] == "jax" and (held["xla_compilations"], held["recompilations"]) == (2, 0)
    assert len(held["logged"]) == len(kept["logged"]) > 1
    assert held["logged"] == pytest.approx(kept["logged"], rel=BF16_RESOLUTION)
    assert [e["eval_loss"] for e in held["evaluations"]] == pytest.approx(
        [e["eval_loss"] for e in kept["evaluations"]], rel=BF16_RESOLUTION)
