"""Evaluation as one JAX function: the task's eval_batch (the forward, each example's loss rounded to fixed point, the
named counts and scores: loop/evaluation.py's Tally sums them) traced once through torchax and replayed for every
batch as one node of torch_xla's graph, as the training step is (jax_step.py).

Why: the lazy evaluation traces every operation of the forward in Python at every batch, the host's cost the JAX
step removed from training; it is paid at every evaluation, so it grows with --eval_steps.

The counts are int64 sums (a batch's loss in fixed point passes 2**31), so the function is traced and lowered with
JAX's 64-bit types on (`jax.experimental.enable_x64`, for this trace only: the process's other JAX functions keep
int32, jax_step._int32 says why).
"""

import contextlib

import torch

from .model_in_trace import autocast, plain_forwards
from .runtime import ready_for_a_jax_call


class WholeEval:
    """`eval_batch(model, batch, valid, metric_dtype)` (the task's) as one JAX function over the model's weights:
    `evaluate(batch, valid)` -> the same dict of counts and scores, lazy.

    `model`: the prepared module on the XLA device (its forward maybe wrapped by Accelerate's autocast or FSDPv2:
    the original forward runs, under torchax's autocast when `autocast_dtype` is given)."""

    def __init__(self, model, eval_batch, metric_dtype, autocast_dtype=None):
        from torch_xla.core.xla_builder import JaxCallable

        self.model = model
        self.inputs = {**dict(model.named_parameters()), **dict(model.named_buffers())}
        ready_for_a_jax_call(list(self.inputs.values()))
        self.callable = JaxCallable(eval_function(model, eval_batch, metric_dtype, autocast_dtype))

    @torch.no_grad()
    def __call__(self, batch: dict, valid) -> dict:
        from jax.experimental import enable_x64

        with enable_x64():  # traced (once per input structure) and lowered with int64 counts
            return self.callable(self.inputs, dict(batch), valid)


def eval_function(model, eval_batch, metric_dtype, autocast_dtype=None):
    """`(weights and buffers by name, batch, valid) -> eval_batch's dict`, in JAX through torchax."""
    import torchax
    from torchax.interop import jax_view, torch_view

    env = torchax.default_env()

    def function(inputs, batch, valid):
        amp = autocast(env, autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        with env, amp, plain_forwards(model):
            views = torch_view(inputs)

            def forward(**arguments):
                return torch.func.functional_call(model, views, (), arguments)

            found = eval_batch(forward, torch_view(batch), torch_view(valid), metric_dtype)
        return jax_view(found)

    return function
