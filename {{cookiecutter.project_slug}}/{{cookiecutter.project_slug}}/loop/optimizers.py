"""The optimizer a run steps with (--optim): torch's AdamW by default, transformers' Adafactor, or (with
--kahan_summation) optimi's AdamW, which keeps the part of each bf16 update that rounding drops (precision/bf16_updates.py).

Each is stepped inside the training step's graph, and none adds a graph as its learning rate or step count moves:
the run sends Python scalars to the device as data (xla/compilation.py), Adafactor's per-step decay among them.
"""

import torch


def make_optimizer(name: str, parameters, learning_rate: float, weight_decay: float, kahan_summation: bool):
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # As in Accelerate's TPU fine-tuning example: the run's learning rate and schedule, not Adafactor's own
        # relative step size. Its state is factored: per matrix a row and a column of second moments, no first
        # moment (beta1 None), about a weight's worth of bytes less per weight than AdamW's two moments.
        return Adafactor(parameters, lr=learning_rate, weight_decay=weight_decay, scale_parameter=False,
                         relative_step=False, warmup_init=False)
    if not kahan_summation:
        # foreach: torch picks its per-tensor loop for any device but CUDA's, and on XLA that loop is Python tracing
        # every step: the multi-tensor path traces the same update in fewer calls (the benchmarks' demo step on
        # XLA:CPU: the optimizer's tracing 24 ms -> 14 ms a step, the same 3 graphs).
        return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=weight_decay, foreach=True)
    from optimi import AdamW

    # foreach and triton off: optimi 0.3 picks Triton only for CUDA tensors, and its foreach path warns that
    # it is deprecated; the for-loop step is one fused graph on XLA all the same.
    return AdamW(parameters, lr=learning_rate, weight_decay=weight_decay, kahan_sum=True, foreach=False, triton=False)
