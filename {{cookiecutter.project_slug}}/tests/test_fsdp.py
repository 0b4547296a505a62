"""The fsdp layout (SPMD FSDPv2) on 4 XLA CPU devices in one process: the same training as one device, sharded.

`CPU_NUM_DEVICES=4` gives four real XLA devices; the graphs, their sharding and the checkpoints are real.
Each run is a fresh process (SPMD is chosen before the runtime starts). The runs are about the fsdp layout: they run
in a project baked with parallelism=fsdp (tests/conftest.py); the checks of its options run everywhere.
"""

import signal
import time

import pytest
import torch
from comparing import float32_apart, relative
from conftest import (
    METRIC,
    RUN_CLI,
    STEP_DOOR,
    TASK,
    StepDoor,
    evaluate_on_cpu,
    python_code,
    quick,
    spmd_env,
    start,
    train,
    train_recording_losses,
)

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.parallel.fsdp_wrapping import layer_class

# The demo in float32 (so that float32's bound means something), 2 epochs, each half naming its layout (it trains in an fsdp
# project, whose default is fsdp). The global batches are the same both ways (train 16, eval 64): each step syncs the
# graph once and every sync advances XLA's random seed, so the same number of eval steps keeps the next epoch's dropout
# masks the same.
RUN = ["--demo", "true", "--max_seq_length", "64", "--num_epochs", "2", "--mixed_precision", "no",
       "--max_recompilations", "0"]
ONE_DEVICE = ["--parallelism", "data", "--train_batch_size", "16", "--eval_batch_size", "64", "--checkpoint", "false",
              "--export", "false"]
FOUR_DEVICES = ["--parallelism", "fsdp", "--train_batch_size", "4", "--eval_batch_size", "16", "--save_steps", "5"]
# The sharded run that exports keeps its best evaluation's weights (loop/best_model.py: put together on the host from
# the shards during the run) and exports them: no graph more, and the same weights after a kill and a resume.
EXPORTING = [*FOUR_DEVICES, "--load_best_model_at_end", "true"]
DEVICES = 4


def run_env(devices: int) -> dict:
    """Every run here is long (60 steps): optimised code (conftest.child_env's `long`), the same in all of them,
    since their weights and losses are compared to each other."""
    return spmd_env(devices, long=True)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    return train_recording_losses(tmp_path_factory.mktemp("data-1"), *RUN, *ONE_DEVICE, env=run_env(1))


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp-4")
    report, result, losses = train_recording_losses(folder, *RUN, *EXPORTING, env=run_env(DEVICES))
    return report, result, losses, folder / "outputs"


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("float32", "losses, eval loss and metrics of 2 epochs: fsdp on 4 SPMD devices against the data "
                      "layout on one")
def test_four_sharded_devices_train_like_one(one_device, four_devices):
    """Two programs in float32: the losses and the eval loss within float32's bound for the run's steps
    (tests/comparing.py). The accuracy is a count: a row takes the other label only where its two probabilities are
    within that bound of a tie, and a trained demo's rows are far from one (the smallest margin measured on the eval
    rows of a 6-step run's export: 0.058, test_predict.py), so it is compared exactly."""
    single, _, single_losses = one_device
    sharded, _, sharded_losses, _ = four_devices
    assert single["layout"]["parallelism"] == "data" and sharded["layout"]["parallelism"] == "fsdp"
    steps = len(sharded_losses)
    assert len(single_losses) == steps == sharded["train_examples"] // 16 * 2 >= 10
    apart = float32_apart(steps)
    for step, (a, b) in enumerate(zip(single_losses, sharded_losses, strict=True), start=1):
        assert relative(b, a) <= apart, (step, a, b)
    assert sum(sharded_losses[-5:]) < sum(sharded_losses[:5])  # and it learns
    assert relative(sharded["eval_loss"], single["eval_loss"]) <= apart
    if TASK == "text-classification":
        assert sharded["eval_accuracy"] == single["eval_accuracy"] > 0.6
        # Per-example scores, split over the chips by the eval graph and made whole in it (devices.readable_later).
        assert sharded["eval_roc_auc"] == pytest.approx(single["eval_roc_auc"], abs=2e-3)
    else:  # exp of the eval loss: its relative difference is the loss's absolute one
        assert relative(sharded["eval_perplexity"], single["eval_perplexity"]) <= 2 * apart * single["eval_loss"]
    assert sharded["eval_examples_counted"] == single["eval_examples_counted"]  # padding masked out


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
def test_each_device_holds_a_quarter_of_every_parameter_and_of_the_optimizer_state(one_device, four_devices):
    layout = four_devices[0]["layout"]
    assert layout["mesh"] == {"fsdp": DEVICES} and layout["devices"] == DEVICES
    for what in ("parameter", "optimizer"):
        by_device, whole = layout[f"{what}_bytes_by_device"], layout[f"{what}_bytes"]
        assert len(by_device) == DEVICES
        # Read from the shards' index ranges: every element is held by exactly one device (nothing replicated) ...
        assert sum(by_device) == whole, (what, by_device, whole)
        # ... and evenly: a dimension that 4 does not divide leaves one row more on some devices.
        assert max(by_device) - min(by_device) < 0.01 * whole, by_device
        assert layout[f"{what}_bytes_per_device"] == max(by_device)
    # The same model as the one-device run, which holds it all.
    assert layout["parameter_bytes"] == one_device[0]["layout"]["parameter_bytes_per_device"]


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
def test_sharding_adds_no_graph_and_epochs_add_none(one_device, four_devices):
    single, sharded = one_device[0], four_devices[0]
    # The same 2 graphs as one device (the step, whose optimizer state exists before the first one, and the
    # evaluation): sharding needs none more. An accumulator fresh from the host is marked replicated like a graph's output (devices.device_values).
    assert sharded["xla_compilations"] == single["xla_compilations"] == 2
    assert [graph["phase"] for graph in sharded["graphs"]["graphs"]] == ["train", "eval"]
    assert sharded["process_compilations_after_each_epoch"] == [2, 2]
    assert sharded["recompilations"] == 0


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("bit for bit", "metrics and exported weights on 4 SPMD devices: killed and resumed from a "
                      "sharded checkpoint against the uninterrupted run")
def test_sigkill_and_resume_end_with_the_uninterrupted_weights_and_metrics(tmp_path, four_devices):
    uninterrupted, _, _, uninterrupted_output = four_devices
    output = tmp_path / "outputs"
    # Killed while it waits after step 6 (conftest.STEP_DOOR): step 5's checkpoint is the newest one.
    door = StepDoor(tmp_path / "door", 6)
    command = python_code(STEP_DOOR + RUN_CLI, "--output_dir", str(output), *RUN, *EXPORTING)
    stderr = tmp_path / "killed.stderr"
    process = start(command, {**run_env(DEVICES), **door.env}, tmp_path / "killed.stdout", stderr)
    deadline = time.monotonic() + 600
    while not door.waiting():
        assert process.poll() is None, stderr.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, "the run never reached step 6"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert (output / "checkpoints" / "LATEST").read_text().strip() == "step-5"
    assert (output / "checkpoints" / "step-5" / "sharded" / ".metadata").is_file()  # torch.distributed.checkpoint

    resumed, result = train(tmp_path, *RUN, *EXPORTING, "--resume", env=run_env(DEVICES))
    assert "resume: continuing after epoch 0, step 5 of epoch 1" in result.stdout
    for key in (METRIC, "eval_loss", "eval_examples_counted"):
        assert resumed[key] == uninterrupted[key], key
    assert resumed["learning_rate"]["after_training"] == uninterrupted["learning_rate"]["after_training"]
    assert_same_weights(output / "model", uninterrupted_output / "model")


def assert_same_weights(folder, other) -> None:
    from safetensors.torch import load_file

    mine, theirs = load_file(folder / "model.safetensors"), load_file(other / "model.safetensors")
    assert mine.keys() == theirs.keys()
    different = [name for name in mine if not torch.equal(mine[name], theirs[name])]
    assert not different, different


@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("float32", "the export's metrics on the host's CPU against the run's best evaluation on 4 SPMD "
                      "devices")
def test_the_export_loads_with_from_pretrained_off_xla_and_evaluates_to_the_run_s_metrics(four_devices):
    """The exported folder is a plain save_pretrained one: no wrapper prefixes, no torch_xla needed to read it.

    Evaluated here on the plain CPU with the project's own eval step and batching.
    """
    from transformers import AutoTokenizer

    from {{ cookiecutter.project_slug }}.tasks import task

    report, _, _, output = four_devices
    assert report["exported"] == str(output / "model")
    best = report["best_model"]
    assert best["kept_writes"] >= 1 and best["exported"]["global_step"] == best["best"]["global_step"]
    assert best["exported"]["epoch"] == min(report["evaluations"], key=lambda found: found["eval_loss"])["epoch"]
    exported = best["exported"]["evaluation"]  # the metrics of the weights exported
    model = task.AUTO_MODEL.from_pretrained(output / "model").eval()
    assert not any("_orig_module" in name for name in model.state_dict())
    config = TrainConfig(demo=True, max_seq_length=64)
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=True)
    assert AutoTokenizer.from_pretrained(output / "model").get_vocab() == tokenizer.get_vocab()
    found = evaluate_on_cpu(model, tokenizer, eval_examples, 64)
    assert found["eval_examples_counted"] == exported["eval_examples_counted"]
    # The same weights evaluated by two float32 programs (one forward: tests/comparing.py); the accuracy, a count, as
    # in test_four_sharded_devices_train_like_one.
    assert relative(found["eval_loss"], exported["eval_loss"]) <= float32_apart(1)
    if TASK == "text-classification":
        assert found["eval_accuracy"] == exported["eval_accuracy"]
        assert found["eval_roc_auc"] == pytest.approx(exported["eval_roc_auc"], abs=2e-3)  # each real row once


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
@pytest.mark.compares("float32", "the first step's loss with gradient checkpointing against without, in each layout")
def test_gradient_checkpointing_trains_in_both_layouts(tmp_path, one_device, four_devices):
    """It runs on XLA:CPU (torch_xla's checkpoint around each block); its memory saving shows only on a TPU.

    Compared with this module's plain runs of each layout: the same data, batches and seed, one epoch (the first
    step does not depend on the number of epochs), no checkpoints or export (they come after it).
    """
    plain_runs = {"data": one_device[2], "fsdp": four_devices[2]}
    for name, layout, env in (("data", ONE_DEVICE, run_env(1)), ("fsdp", FOUR_DEVICES, run_env(DEVICES))):
        checkpointed = train_recording_losses(
            tmp_path / name, *RUN, *layout, "--num_epochs", "1", "--checkpoint", "false", "--export", "false",
            "--gradient_checkpointing", "true", env=env,
        )
        assert checkpointed[0]["config"]["gradient_checkpointing"] is True
        assert checkpointed[0]["layout"]["parallelism"] == name
        # The first step's loss is the same forward's, in another program (checkpointing's barriers change what XLA
        # fuses): within float32's bound for one step. Later ones may differ by the recomputed dropout.
        assert relative(checkpointed[2][0], plain_runs[name][0]) <= float32_apart(1), name
        assert checkpointed[0]["recompilations"] == 0


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
def test_fsdp_on_one_device_says_that_nothing_is_sharded(tmp_path):
    """Without CPU_NUM_DEVICES the CPU gives one XLA device: the run trains unsharded, and says so once. Its sharded
    checkpoint and export show none of the library warnings that say nothing to a user (launch/library_noise.py)."""
    report, result = train(tmp_path, *quick("--parallelism", "fsdp"), env=spmd_env(1))
    said = "fsdp: the mesh has 1 device, so nothing is sharded (on the CPU, CPU_NUM_DEVICES=N gives N XLA devices; " \
           "on a TPU every chip joins the mesh)"
    assert result.stdout.splitlines().count(said) == 1
    assert report["layout"]["mesh"] == {"fsdp": 1}
    assert report["checkpoint"] and "Warning" not in result.stderr, result.stderr[-3000:]


def test_fsdp_without_torch_xla_is_one_clear_error(tmp_path):
    report, result = train(tmp_path, *quick("--parallelism", "fsdp"), xla=False, check=False)
    assert result.returncode == 2 and report is None
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
        "error: parallelism='fsdp' needs PyTorch/XLA (SPMD): install torch_xla, or use parallelism='data'"
    ]


def test_the_layer_to_shard_is_found_from_the_model_or_named():
    from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

    bert = BertForSequenceClassification(BertConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, vocab_size=32))
    assert layer_class(bert).__name__ == "BertLayer"  # the one of its _no_split_modules it repeats
    del bert._no_split_modules  # a model without them: the class of its repeated blocks
    assert layer_class(bert).__name__ == "BertLayer"
    llama = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, vocab_size=32))
    assert layer_class(llama).__name__ == "LlamaDecoderLayer"  # from its _no_split_modules
    assert layer_class(bert, "BertAttention").__name__ == "BertAttention"
    with pytest.raises(ConfigError, match=r"^fsdp_layer_class='Nope': BertForSequenceClassification has no such module"):
        layer_class(bert, "Nope")
    with pytest.raises(ConfigError, match="pass --fsdp_layer_class with the class name of its blocks"):
        layer_class(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_fsdp_layer_class_is_refused_without_fsdp():
    with pytest.raises(ConfigError, match="^fsdp_layer_class is for parallelism='fsdp' only"):
        TrainConfig(fsdp_layer_class="BertLayer", parallelism="data")
    with pytest.raises(ConfigError, match=r"^parallelism='ddp': must be one of data, fsdp"):
        TrainConfig(parallelism="ddp")

