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
