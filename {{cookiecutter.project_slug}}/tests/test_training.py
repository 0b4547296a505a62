"""The training function on an XLA CPU device and on a plain CPU: report, compilations, counting."""

import csv
import re
import shlex

import pytest
from comparing import float32_apart, near_ties
from conftest import PROJECT, quick

# What a run reports and how its demo learns does not depend on the layout: tested in a data-layout project (the fsdp
# layout's own graphs, epochs and demo are test_fsdp.py's and test_chip_count.py's).
pytestmark = [pytest.mark.xla, pytest.mark.slow, pytest.mark.layout("data")]

REPORT_FIELDS = (
    "device", "distributed_type", "num_processes", "epochs", "train_examples", "steady_examples_per_second",
    "eval_accuracy", "eval_macro_f1", "eval_roc_auc", "eval_confusion_matrix", "eval_examples_counted", "xla_compilations", "compile_seconds", "precision",
)
EVAL_SET_SIZE = 120  # data/demo/eval.csv
QUICK_THREE_EPOCHS = quick("--num_epochs", "3", "--mixed_precision", "no")


def labelled_apart(exported: str) -> tuple[list[int], list[int], list[float], list[int]]:
    """(true labels, predicted labels, label 1's probabilities, the near ties) of the eval file's rows, labelled apart
    from the run: the exported model in transformers' own pipeline on the host's CPU, one text at a time and unpadded.

    The run's eval graph on the device and the pipeline on the host are two float32 programs: a row whose two
    probabilities are within float32's bound of each other (tests/comparing.py) may take either label, every other
    row the same one. The near ties are those rows."""
    from transformers import pipeline

    with open(PROJECT / "data" / "demo" / "eval.csv", newline="", encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == EVAL_SET_SIZE
    classify = pipeline("text-classification", model=exported, device="cpu")
    every = classify([row["text"] for row in rows], truncation=True, max_length=64, top_k=None)  # best first
    label_ids = {name: index for index, name in classify.model.config.id2label.items()}
    positive = [next(found["score"] for found in each if label_ids[found["label"]] == 1) for each in every]
    ties = near_ties([each[0]["score"] - each[1]["score"] for each in every], float32_apart(1))
    return [int(row["label"]) for row in rows], [label_ids[each[0]["label"]] for each in every], positive, ties


def same_counts(found: list[list[int]], expected: list[list[int]], ties: list[int]) -> bool:
    """Two confusion matrices of the same rows: the same, but for the near ties, each of which may move one row from
    one cell to another."""
    return sum(abs(a - b) for row, other in zip(found, expected, strict=True)
               for a, b in zip(row, other, strict=True)) <= 2 * len(ties)


@pytest.mark.compares("float32", "the eval counts and metrics of a 3-epoch run (the device's eval graph) against "
                      "scikit-learn's on the export's labels from transformers' pipeline on the host")
def test_compilations_do_not_grow_with_epochs(run_training):
    """One three-epoch run: epochs 2 and 3 compile nothing that epoch 1 did not."""
    report, _ = run_training(*QUICK_THREE_EPOCHS)
    for field in REPORT_FIELDS:
        assert field in report, field
    assert report["device"] == "xla:CPU"
    assert report["distributed_type"] == "XLA"
    assert report["num_processes"] == 1
    assert report["epochs"] == 3
    # 16 per batch over 120 examples: the last eval batch is padded with masked rows.
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    # The eval metrics are those of the exported model's labels on the host (float32: every row agrees but a near
    # tie), computed by scikit-learn: the confusion matrix's counts, the accuracy and macro-F1.
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, roc_auc_score

    truth, predicted, positive, ties = labelled_apart(report["exported"])
    assert same_counts(report["eval_confusion_matrix"], confusion_matrix(truth, predicted, labels=[0, 1]).tolist(), ties)
    assert abs(report["eval_accuracy"] - accuracy_score(truth, predicted)) <= len(ties) / EVAL_SET_SIZE
    if not ties:
        assert report["eval_macro_f1"] == f1_score(truth, predicted, labels=[0, 1], average="macro", zero_division=0.0)
    # ROC AUC, from the probabilities each eval graph kept and evaluation read once at its end (no graph of its own:
    # still 2 below): scikit-learn's on the host's probabilities (which may differ in their last bits: a near tie
    # may swap one pair, hence not exactly).
    assert 0 <= report["eval_roc_auc"] <= 1
    assert report["eval_roc_auc"] == pytest.approx(roc_auc_score(truth, positive), abs=2e-3)
    # Speeds are reported (compared in the benchmarks, never here: a loaded machine would decide such a test).
    assert report["examples_per_second_with_compilation"] > 0 and report["steady_examples_per_second"] > 0
    assert report["steady_step_seconds"] > 0
    # The default bake's step: the whole step as one JAX function (auto), its host time one phase (watch/host_tracing.py).
    assert report["step_function"] == "jax" and report["step_function_why"] is None
    traced = report["host_tracing_seconds_per_step"]
    assert traced["step"] >= traced["whole_step"] > 0
    assert traced["steady_steps"] == report["learning_rate"]["optimizer_steps"] - 2
    assert report["host_share_of_step"]["share"] is None and "XLA:CPU" in report["host_share_of_step"]["says"]
    assert report["compile_seconds"] > 0
    after_epoch_1, after_epoch_2, after_epoch_3 = report["process_compilations_after_each_epoch"]
    assert after_epoch_1 == after_epoch_2 == after_epoch_3
    # One train graph and one eval graph, as the README promises, whatever the number of epochs.
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    assert_the_card_says_what_the_run_did(report, [*QUICK_THREE_EPOCHS, "--output_dir", report["config"]["output_dir"]])


def assert_the_card_says_what_the_run_did(report: dict, argv: list[str]) -> None:
    """The export's README.md, read as the hub reads a model card: its metadata, the data's row counts, settings that
    parse back to the run's own, the precision, the graphs and every eval number."""
    from huggingface_hub import ModelCard

    from {{ cookiecutter.project_slug }} import cli

    card = ModelCard.load(f"{report['exported']}/README.md")
    assert (card.data.pipeline_tag, card.data.library_name, card.data.base_model) == (
        "text-classification", "transformers", None)  # the demo: built from a config, no base model
    text = card.text
    assert "- trained on the demo's shipped files: 96 examples\n- evaluated on 120 examples\n" in text
    settings = re.search(r"- the settings: `(.+)`", text)[1]
    assert shlex.split(settings)[:2] == ["python", "train.py"]
    assert cli.parse(shlex.split(settings)[2:]) == cli.parse(argv)
    assert "- precision: fp32 (f32->f32, f64->f64 in graph)" in text
    assert "- on xla:CPU x 1 processes: 2 XLA graphs compiled, 0 after warm-up" in text
    for name in ("accuracy", "macro_f1", "loss", "precision_0", "recall_1", "f1_1"):
        assert f"| {name} | {report['eval_' + name]:.4f} |" in text, name
    for label, row in enumerate(report["eval_confusion_matrix"]):
        assert f"| true {label} | {' | '.join(map(str, row))} |" in text


def test_offline_demo_learns(demo_report):
    """The default demo (baked epochs and sequence length, no flags) reaches the promised accuracy."""
    report, result = demo_report("fp32")
    assert "offline demo" in result.stdout
    assert report["data"] == "demo"
    assert report["train_examples"] == 480
    assert report["eval_accuracy"] >= 0.9
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0


@pytest.mark.parametrize("level", ["no", "bf16"])
def test_plain_cpu_without_torch_xla(run_training, level):
    report, _ = run_training(*quick("--mixed_precision", level), xla=False)
    assert report["device"] == "cpu"
    assert report["distributed_type"] == "NO"
    assert report["xla_compilations"] is None
    assert report["compile_seconds"] is None
    assert report["eval_examples_counted"] == EVAL_SET_SIZE
    # Off XLA, bf16 is torch.autocast on the CPU, as on XLA.
    assert report["precision"]["autocast"] is (level == "bf16")
    if level == "bf16":
        assert report["precision"]["via"] == "torch.autocast(cpu, bfloat16) around the forward"


# Evaluated every 2 of the 18 steps at a rate that makes the demo's eval loss best early and worse after (measured:
# best at step 6 of epoch 1, then 3 evaluations without improvement, so the run stops at step 12 in epoch 2).
# The lazy step: at this seed its evaluations rise after the best one and the last one's labels differ from the best's,
# which is what tells an export of the best weights from one of the last (the JAX step's draw other dropout masks).
BEST_AND_STOP = quick("--num_epochs", "3", "--mixed_precision", "no", "--eval_steps", "2", "--learning_rate", "3e-3",
                      "--load_best_model_at_end", "true", "--early_stopping_patience", "3", "--step_function", "lazy")


@pytest.mark.compares("float32", "the best evaluation's counts (the device) against the export's labels from "
                      "transformers' pipeline on the host; a resume's export against the run's (bit for bit)")
def test_the_best_evaluation_is_exported_and_patience_ends_the_run(run_training):
    """--load_best_model_at_end exports the best evaluation's weights (their labels on the host are its counts, not the
    last evaluation's), --early_stopping_patience ends the run where the evaluations say, no graph is added, and a
    resume of the stopped run ends at once with the same export."""
    report, result = run_training(*BEST_AND_STOP)
    losses = [evaluation["eval_loss"] for evaluation in report["evaluations"]]
    best = min(range(len(losses)), key=losses.__getitem__)  # the first of the lowest: a tie is no improvement
    assert len(losses) - 1 - best == 3 and all(loss >= losses[best] for loss in losses[best + 1:])
    stopped_at = report["evaluations"][-1]["global_step"]
    assert stopped_at < report["learning_rate"]["optimizer_steps"]  # it did stop early
    assert report["early_stopping"] | {"why": None} == {
        "patience": 3, "stopped": True, "epoch": report["evaluations"][-1]["epoch"], "global_step": stopped_at,
        "evaluations_without_improvement": 3, "why": None}
    assert f"early stopping at epoch {report['early_stopping']['epoch']}, step {stopped_at}: eval_loss did not " \
           f"improve on {losses[best]:.4f}" in result.stdout
    exported = report["best_model"]["exported"]
    assert exported["global_step"] == report["evaluations"][best]["global_step"] == report["best_model"]["best"]["global_step"]
    assert exported["evaluation"]["eval_loss"] == losses[best]
    truth, predicted, _, ties = labelled_apart(report["exported"])
    from sklearn.metrics import confusion_matrix

    found = confusion_matrix(truth, predicted, labels=[0, 1]).tolist()
    assert same_counts(found, exported["evaluation"]["eval_confusion_matrix"], ties)
    assert exported["evaluation"]["eval_confusion_matrix"] != report["eval_confusion_matrix"]
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0  # keeping the best compiled nothing
    assert report["step_function"] == "lazy" and report["step_function_why"] is None  # asked for: nothing to explain
    traced = report["host_tracing_seconds_per_step"]  # the lazy step's phases, each marked (watch/host_tracing.py)
    # One step's phases and whole (watch/host_tracing.py), each rounded to a microsecond: 2e-6 is the four roundings.
    assert traced["step"] >= traced["forward"] + traced["backward"] + traced["optimizer"] - 2e-6 > 0
    assert report["best_model"]["kept_writes"] == 1 + sum(
        loss < min(losses[:index]) for index, loss in enumerate(losses) if index)
    # The checkpoint written where it stopped holds the best record: the resume trains nothing and exports the same.
    resumed, result = run_training(*BEST_AND_STOP, "--resume", "true")
    assert resumed["evaluations"] == [] and resumed["best_model"]["exported"] == exported
    assert "(a resume of a run that had stopped)" in result.stdout
    assert labelled_apart(resumed["exported"])[1] == predicted
