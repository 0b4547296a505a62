"""Each task's evaluation counts the losses that are not finite, and keeps them out of its exact loss sum: the loop stops
a run on them (fault_tolerance/loss_guard.py; test_loss_guard.py stops one). Its counts are addressed by name, and a
name that slips fails. On the host's CPU, for this project's task.
"""

import pytest
import torch
from conftest import TASK, evaluate_on_cpu

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.loop.evaluation import Tally
from {{ cookiecutter.project_slug }}.precision.fixed_point import from_fixed, to_fixed
from {{ cookiecutter.project_slug }}.tasks import task


def test_a_nan_logit_is_counted_and_kept_out_of_the_loss_sum():
    config = TrainConfig(demo=True, max_seq_length=32)
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=True)
    model = task.build_model(config, demo=True, vocab_size=len(tokenizer)).eval()
    finite = evaluate_on_cpu(model, tokenizer, eval_examples, config.max_seq_length)
    assert finite["eval_non_finite_losses"] == 0 and finite["eval_loss"] > 0

    def poison(module, inputs, output):
        output["logits"] = output["logits"] * float("nan")
        return output

    model.register_forward_hook(poison)
    poisoned = evaluate_on_cpu(model, tokenizer, eval_examples, config.max_seq_length)
    every_loss = poisoned["eval_tokens_counted" if TASK == "causal-lm" else "eval_examples_counted"]
    assert poisoned["eval_non_finite_losses"] == every_loss > 0
    assert poisoned["eval_loss"] == 0.0  # the sum of the finite ones: none


def test_a_count_under_a_wrong_name_fails_loudly():
    """eval_batch's output by name: a count renamed (or one undeclared) stops the evaluation at its first batch, and
    metrics() reading a name nobody gave is a KeyError, never a neighbour's value."""
    config = TrainConfig(demo=True, max_seq_length=32)
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=True)
    model = task.build_model(config, demo=True, vocab_size=len(tokenizer)).eval()
    batch = task.make_collator(tokenizer, "fixed", config.max_seq_length)([eval_examples[i] for i in range(4)])
    valid = torch.ones(4, dtype=torch.int64)
    with torch.no_grad():
        found = task.eval_batch(model, dict(batch), valid, torch.float32)
    tally = Tally(torch.device("cpu"))
    tally.add(found, valid)
    counts, scores = tally.results()
    assert set(counts) == set(task.COUNTS) and set(scores) == set(task.SCORES)
    assert counts[task.COUNTS[1]] > 0 and task.metrics(counts, scores)["eval_loss"] > 0
    renamed = {("losss" if name == "loss" else name): value for name, value in found.items()}
    with pytest.raises(ValueError, match=r"missing \['loss'\], undeclared \['losss'\]"):
        Tally(torch.device("cpu")).add(renamed, valid)
    with pytest.raises(ValueError, match="undeclared"):
        Tally(torch.device("cpu")).add({**found, "extra": valid.sum()}, valid)
    with pytest.raises(ValueError, match="int64"):
        Tally(torch.device("cpu")).add({**found, "loss": found["loss"].float()}, valid)
    with pytest.raises(KeyError, match="loss"):
        task.metrics({name: value for name, value in counts.items() if name != "loss"}, scores)


def test_a_loss_becomes_the_nearest_whole_number_of_2_to_the_minus_24():
    """Rounded, not truncated (each loss's error at most 2**-25), against Python's own exact arithmetic."""
    losses = torch.tensor([2 / 3, 0.1, 7.25, 1e-9], dtype=torch.float32)
    expected = [round(value * 2**24) for value in losses.tolist()]  # float32 values, exactly as Python floats
    assert to_fixed(losses).tolist() == expected and to_fixed(losses).dtype == torch.int64
    assert all(abs(from_fixed(whole) - value) <= 2**-25 for whole, value in zip(expected, losses.tolist(), strict=True))
{%- if cookiecutter.task != "causal-lm" %}


def test_the_classifier_metrics_are_scikit_learns_for_the_same_predictions():
    """Four labels: one never predicted, one never present; the padded batch's masked copies count for nothing."""
    from types import SimpleNamespace

    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    truth = torch.tensor([0, 0, 1, 1, 1, 3, 3, 0, 1, 3, 3, 3])
    predicted = torch.tensor([0, 1, 1, 2, 1, 0, 1, 0, 2, 1, 3, 3])
    valid = torch.tensor([1] * 10 + [0, 0])  # the last two rows are masked copies (right, were they counted)

    class Predicts(torch.nn.Module):
        def forward(self, labels):
            return SimpleNamespace(logits=torch.nn.functional.one_hot(predicted, 4).float() * 5)

    tally = Tally(torch.device("cpu"))  # two batches, as evaluation adds them
    for side in (0, 1):
        half = valid * (torch.arange(12) % 2 == side)
        tally.add(task.eval_batch(Predicts(), {"labels": truth}, half, torch.float32), half)
    found = task.metrics(*tally.results())
    kept = valid.bool()
    y, p, labels = truth[kept].tolist(), predicted[kept].tolist(), [0, 1, 2, 3]
    assert found["eval_confusion_matrix"] == confusion_matrix(y, p, labels=labels).tolist()
    assert found["eval_accuracy"] == accuracy_score(y, p) and found["eval_examples_counted"] == 10
    precision, recall, f1, _ = precision_recall_fscore_support(y, p, labels=labels, zero_division=0.0)
    for label in labels:
        assert (found[f"eval_precision_{label}"], found[f"eval_recall_{label}"], found[f"eval_f1_{label}"]) == (
            precision[label], recall[label], f1[label]), label
    assert found["eval_macro_f1"] == f1_score(y, p, labels=labels, average="macro", zero_division=0.0)
    # ROC AUC from the real rows' probabilities (the masked copies dropped): label 2 is never present, so scikit-learn's
    # one-vs-rest refuses these labels; here the mean is over the labels present, each scikit-learn's own binary AUC.
    from sklearn.metrics import roc_auc_score

    scores = torch.nn.functional.one_hot(predicted, 4).float().mul(5).softmax(dim=-1)[kept].numpy()
    with pytest.raises(ValueError):
        roc_auc_score(y, scores, multi_class="ovr", average="macro")
    present = [roc_auc_score([truth == label for truth in y], scores[:, label]) for label in (0, 1, 3)]
    assert found["eval_roc_auc"] == pytest.approx(sum(present) / 3, abs=1e-12)


def test_roc_auc_is_scikit_learns_on_random_scores():
    """Binary and one-vs-rest macro ROC AUC against scikit-learn's, on random probabilities with many ties (rounded to
    tenths), and a case counted by hand: the chance that a positive outscores a negative, a tie counting half."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from {{ cookiecutter.project_slug }}.tasks.roc_auc import roc_auc

    generator = torch.Generator().manual_seed(0)
    for classes, rows, decimals in ((2, 200, 1), (2, 57, 6), (3, 300, 1), (5, 400, 2)):
        labels = torch.randint(classes, (rows,), generator=generator)
        probabilities = torch.rand(rows, classes, generator=generator, dtype=torch.float64).softmax(dim=-1)
        probabilities = (probabilities * 10**decimals).round() / 10**decimals  # ties, as low precision makes them
        if classes > 2:  # scikit-learn's one-vs-rest asks rows that sum to 1
            probabilities = probabilities / probabilities.sum(dim=-1, keepdim=True)
        expected = roc_auc_score(labels.numpy(), probabilities.numpy() if classes > 2 else probabilities[:, 1].numpy(),
                                 multi_class="ovr", average="macro")
        assert roc_auc(labels, probabilities) == pytest.approx(expected, abs=1e-12), (classes, rows)
    # Positives score 0.8 and 0.4, negatives 0.4 and 0.1: of the 4 pairs, 3 won and 1 tied.
    assert roc_auc([1, 1, 0, 0], np.array([[0.2, 0.8], [0.6, 0.4], [0.6, 0.4], [0.9, 0.1]])) == 3.5 / 4
    assert roc_auc([1, 1, 1], [[0.5, 0.5]] * 3) is None  # one label only: no AUC (scikit-learn raises)
{%- endif %}
