"""The task's eval metrics of a model on the host's CPU in float32, with the project's own eval step and batching.

What a run's reported metrics are checked against: the exported model re-evaluated outside XLA and outside any
bf16 level (tests, and the precision benchmark's "gap to a float32 re-evaluation").
"""

import torch

from ..data import batching
from ..tasks import task
from .evaluation import Tally


def evaluate_on_host(model, tokenizer, eval_examples, max_seq_length: int, batch_size: int = 16) -> dict:
    collator = task.make_collator(tokenizer, "fixed", max_seq_length)
    model = model.float().eval()
    tally = Tally(torch.device("cpu"))
    for batch in batching.eval_loader(eval_examples, collator, batch_size, 1):
        valid = batch.pop(batching.VALID)
        with torch.no_grad():
            tally.add(task.eval_batch(model, batch, valid, torch.float32), valid)
    return task.metrics(*tally.results())
