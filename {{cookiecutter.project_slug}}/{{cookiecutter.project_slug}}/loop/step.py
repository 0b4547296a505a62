"""One optimizer step: the batch's micro-batches forward and backward, clipping, the update and the schedule.

Kept apart from the epoch loop (fit.py) so that the benchmarks time exactly this step. Without gradient
accumulation the step is one graph. With --gradient_accumulation_steps N the device runs one micro-batch at a time
(a sync after each but the last), so that it holds one micro-batch's activations, not the whole step's. Measured
with XLA's buffer assignment on the CPU, a 128-token demo step: 4 micro-batches of 4 in one graph took 33.1 MiB, as
one batch of 16 does; one at a time, at most 9.8 MiB a graph (a batch of 4: 9.4). That is at most two graphs more,
whatever N: the first micro-batch's (the gradients are created) and, from 3 micro-batches on, the middle ones' (added
to); the last one's runs with the update, in the graph a step without accumulation has.

With the JAX step (the default where it can run) the whole step is one JAX function traced once (xla/jax_step.py),
its micro-batches a scan inside it: each step then only hands the weights, moments and batch to it. The host's time in each phase is marked for the report (watch/host_tracing.py).
"""

import contextlib
from typing import NamedTuple

import torch

from ..data.batching import VALID, micro_batch
from ..watch.host_tracing import HostTracing
from ..xla import device as devices


class Step(NamedTuple):
    loss: object  # the micro-batches' mean loss, detached and lazy
    grad_norm: object | None  # the gradients' global norm before clipping (lazy); None without clipping


class Call(NamedTuple):
    """A call of several optimizer steps (--steps_per_execution): what its steps give, lazy unless said."""
    loss: object  # each step's loss, a vector (a masked step's too)
    grad_norm: object | None  # the last real step's gradient norm before clipping; None without clipping
    rates: list  # the learning rate each real step used (host floats)
    real: object  # 1 for each real step, 0 for a masked one


_indices = {}  # (device, N) -> the micro-batches' indices, on the device as data: one graph for every micro-batch


class StepParts(NamedTuple):
    """What one optimizer step uses: preparation.py's Prepared has these same fields, and the benchmarks build one."""
    model: object
    optimizer: object
    scheduler: object
    clip: object = None  # clips the gradients and returns their norm before clipping (Prepared.clip); None: no clipping
    accumulation: int = 1  # micro-batches in the step (--gradient_accumulation_steps)
    whole_step: object = None  # xla/jax_step.py's WholeStep (the JAX step): the whole step in one call
    steps_per_call: int = 1  # --steps_per_execution: optimizer steps in one call of the JAX step (loop/calls.py)


def train_step(accelerator, parts: StepParts, batch, tracing=None):
    """One call: `batch` is one step's batch (a Step comes back), or (--steps_per_execution) a list of at most
    `parts.steps_per_call` batches, one optimizer step each in one call of the JAX step (xla/several_steps.py: a Call).

    One optimizer step over the batch's `parts.accumulation` micro-batches: a Step of their mean loss and the
    gradients' norm before clipping, both detached and still lazy (the caller decides when to sync).

    `parts` is a StepParts or anything with its fields (Prepared). Each micro-batch's loss is divided by their number,
    so that the gradients are those of the mean loss, as one batch of them all would give. `parts.clip()` clips the
    gradients before the update and returns that norm. `parts.whole_step` does all of it in one call; `tracing` times
    the phases on the host (watch/host_tracing.py).
    """
    model, optimizer, scheduler, clip, accumulation = (parts.model, parts.optimizer, parts.scheduler, parts.clip,
                                                       parts.accumulation)
    tracing = tracing or HostTracing()
    tracing.begin()
    if isinstance(batch, list):
        for one in batch:
            one.pop(VALID, None)
        losses, norms, last_norm, rates, real = parts.whole_step.several(batch, scheduler, parts.steps_per_call)
        tracing.lap("whole_step")
        return Call(losses, last_norm, rates, real)
    batch.pop(VALID, None)
    if parts.whole_step is not None:
        loss, grad_norm = parts.whole_step(batch)
        scheduler.step()
        tracing.lap("whole_step")
        return Step(loss, grad_norm)
    if accumulation == 1:
        loss = model(**batch).loss
        tracing.lap("forward")
        accelerator.backward(loss)
        tracing.lap("backward")
        losses = [loss.detach()]
    else:
        losses = _accumulate(accelerator, model, batch, accumulation, tracing)
    grad_norm = clip().detach() if clip is not None else None
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    tracing.lap("optimizer")
    return Step(losses[0] if accumulation == 1 else torch.stack(losses).mean(), grad_norm)


def _accumulate(accelerator, model, batch, accumulation: int, tracing) -> list:
    """The micro-batches' forward and backward passes, the gradients summed in place; their losses, detached."""
    device = next(iter(batch.values())).device
    key = (str(device), accumulation)
    if key not in _indices:
        _indices[key] = [devices.device_values([index], torch.int64, device) for index in range(accumulation)]
    losses = []
    for index, position in enumerate(_indices[key]):
        last = index == accumulation - 1
        # DDP (processes without XLA) reduces the gradients once, in the last backward pass; on XLA they are
        # reduced once per step anyway, by the clip or the optimizer step (no_sync is then a no-op).
        with contextlib.nullcontext() if last else accelerator.no_sync(model):
            loss = model(**micro_batch(batch, accumulation, position)).loss
            tracing.lap("forward")
            accelerator.backward(loss / accumulation)
            tracing.lap("backward")
        losses.append(loss.detach())
        if not last:
            devices.sync(device)  # this micro-batch's activations are freed before the next one runs
            tracing.resume()  # the sync ran the micro-batch: the device's time, not tracing
    return losses
