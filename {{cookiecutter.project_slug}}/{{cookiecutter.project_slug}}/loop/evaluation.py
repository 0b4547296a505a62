"""Evaluation: the task's metrics over the eval set, summed exactly on the device (one graph, any batch), and the
per-example scores of the metrics that are not sums, kept on the device and read once after the last batch.

What a task's eval_batch gives is addressed by the names it declares (tasks/__init__.py): COUNTS are summed, SCORES
are kept row by row. A name given but not declared, or declared but not given, stops the evaluation at its first
batch; a name that metrics() reads and nobody gave is a KeyError.
"""

import functools
import math

import torch

from ..data.batching import VALID
from ..launch import processes
from ..tasks import task
from ..xla import device as devices

REAL = "real"  # each kept batch's mask of real rows (masked copies dropped on the host)


class Tally:
    """One evaluation's results so far, on the device.

    The COUNTS lie end to end in one int64 accumulator: one sum over processes and one transfer, cut back into their
    names and shapes on the host. The SCORES of each batch are outputs of the same eval graph, kept where they are
    (no host read in the loop, no graph of their own), with the batch's mask of real rows; they travel in the
    same transfer as the sums.
    """

    def __init__(self, device):
        self.device = device
        self.shapes = None  # {name: shape} of the COUNTS, from the first batch
        self.sums = None
        self.kept = []  # per batch: {name: rows} of the SCORES and REAL

    def add(self, found: dict, valid) -> None:
        """One batch's eval_batch output (before the sync that ends its graph)."""
        declared = (*task.COUNTS, *task.SCORES)
        if set(found) != set(declared) or len(declared) != len(set(declared)):
            raise ValueError(
                f"eval_batch gave {sorted(found)}; the task declares COUNTS {list(task.COUNTS)} and SCORES "
                f"{list(task.SCORES)} (each name once): missing {sorted(set(declared) - set(found))}, undeclared "
                f"{sorted(set(found) - set(declared))}")
        for name in task.COUNTS:
            if found[name].dtype != torch.int64:
                raise ValueError(f"eval_batch's count {name!r} is {found[name].dtype}: counts are int64 sums (the loss "
                                 "in fixed point), exact in any order")
        shapes = {name: tuple(found[name].shape) for name in task.COUNTS}
        flat = torch.cat([found[name].reshape(-1) for name in task.COUNTS])
        if self.sums is None:
            # As data, not a constant: the first batch's graph is then every batch's.
            self.shapes, self.sums = shapes, devices.device_zeros(flat.shape[0], torch.int64, self.device)
        elif shapes != self.shapes:
            raise ValueError(f"eval_batch's counts changed shape: {shapes}, after {self.shapes}")
        self.sums += flat
        if task.SCORES:
            for name in task.SCORES:
                if found[name].shape[:1] != valid.shape:
                    raise ValueError(f"eval_batch's score {name!r} has shape {tuple(found[name].shape)}: one row per "
                                     f"example of the batch ({valid.shape[0]}) first")
            rows = {name: devices.readable_later(found[name]) for name in task.SCORES}
            rows[REAL] = devices.readable_later(valid > 0)
            self.kept.append(rows)

    def results(self, sum_over=None, gather_over=None) -> tuple[dict, dict]:
        """({count name: its sum, a Python int or nested lists}, {score name: the real rows, a host tensor}).

        `sum_over(tensor)` sums the accumulator over processes on the device, `gather_over(rows)` gathers the host
        rows; both leave them as they are by default (one process).
        """
        if self.sums is None:
            raise ValueError("evaluation: the eval loader gave this process no batch")
        sums = sum_over(self.sums) if sum_over else self.sums
        order = (*task.SCORES, REAL)
        host = devices.to_host([sums, *(rows[name] for rows in self.kept for name in order)])
        counts, start = {}, 0
        for name, shape in self.shapes.items():
            size = math.prod(shape)
            counts[name] = host[0][start:start + size].view(shape).tolist()  # an int for a 0-d count
            start += size
        scores = {}
        if task.SCORES:
            columns = {name: torch.cat(host[1 + index::len(order)]) for index, name in enumerate(order)}
            real = columns.pop(REAL)
            scores = {name: column[real] for name, column in columns.items()}
            scores = gather_over(scores) if gather_over else scores
        return counts, scores


def evaluate(accelerator, model, loader, eval_batch=None, on_step=None) -> dict:
    """The task's metrics over real examples only (masked copies count for nothing), summed on the device.

    Every sum is a whole number (the loss in fixed point), so the result is exact in every precision level.
    `eval_batch(batch, valid)`: one batch's counts and scores, by default the task's eval_batch traced op by op in
    float32 (the loop gives its precision's metric dtype, or the same as one JAX function: xla/jax_eval.py).
    `on_step(step, batch)` runs after each synced step (the graph watch).
    """
    eval_batch = eval_batch or functools.partial(task.eval_batch, model, metric_dtype=torch.float32)
    model.eval()
    device = accelerator.device
    tally = Tally(device)
    for step, batch in enumerate(loader, start=1):
        valid = batch.pop(VALID)
        with torch.no_grad():
            tally.add(eval_batch(batch, valid), valid)
        devices.sync(device)
        if on_step:
            on_step(step, batch)
    counts, scores = tally.results(lambda sums: processes.sum_over_processes(accelerator, sums),
                                   lambda rows: processes.gather_rows_over_processes(accelerator, rows))
    return task.metrics(counts, scores)
