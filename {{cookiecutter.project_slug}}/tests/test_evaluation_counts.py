"""Each task's evaluation counts the losses that are not finite, and keeps them out of its exact loss sum: the loop stops
a run on them (fault_tolerance/loss_guard.py; test_loss_guard.py stops one). On the host's CPU, for this project's task.
"""

import torch
from conftest import TASK, evaluate_on_cpu

from {{ cookiecutter.project_slug }}.config import TrainConfig
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

    halves = [task.eval_batch(Predicts(), {"labels": truth}, valid * (torch.arange(12) % 2 == side), torch.float32)
              for side in (0, 1)]  # two batches' sums, as evaluation adds them
    found = task.metrics((halves[0] + halves[1]).tolist())
    kept = valid.bool()
    y, p, labels = truth[kept].tolist(), predicted[kept].tolist(), [0, 1, 2, 3]
    assert found["eval_confusion_matrix"] == confusion_matrix(y, p, labels=labels).tolist()
    assert found["eval_accuracy"] == accuracy_score(y, p) and found["eval_examples_counted"] == 10
    precision, recall, f1, _ = precision_recall_fscore_support(y, p, labels=labels, zero_division=0.0)
    for label in labels:
        assert (found[f"eval_precision_{label}"], found[f"eval_recall_{label}"], found[f"eval_f1_{label}"]) == (
            precision[label], recall[label], f1[label]), label
    assert found["eval_macro_f1"] == f1_score(y, p, labels=labels, average="macro", zero_division=0.0)
{%- endif %}
