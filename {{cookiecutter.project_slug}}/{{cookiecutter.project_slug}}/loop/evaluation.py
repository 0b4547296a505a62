"""Evaluation: the task's metrics over the eval set, summed exactly on the device (one graph, any batch)."""

import torch

from ..data.batching import VALID
from ..launch import processes
from ..tasks import task
from ..xla import device as devices


def evaluate(accelerator, model, loader, metric_dtype=torch.float32, on_step=None) -> dict:
    """The task's metrics over real examples only (masked copies count for nothing), summed on the device.

    Every sum is a whole number (the loss in fixed point), so the result is exact in every precision level.
    `on_step(step, batch)` runs after each synced step (the graph watch).
    """
    model.eval()
    device = accelerator.device
    counts = None
    for step, batch in enumerate(loader, start=1):
        valid = batch.pop(VALID)
        with torch.no_grad():
            found = task.eval_batch(model, batch, valid, metric_dtype)
        if counts is None:  # its length is the task's (a classifier's depends on its labels); as data, not a constant
            counts = devices.device_zeros(found.shape[0], torch.int64, device)
        counts += found
        devices.sync(device)
        if on_step:
            on_step(step, batch)
    if counts is None:
        raise ValueError("evaluation: the eval loader gave this process no batch")
    counts = processes.sum_over_processes(accelerator, counts).tolist()
    return task.metrics(counts)
