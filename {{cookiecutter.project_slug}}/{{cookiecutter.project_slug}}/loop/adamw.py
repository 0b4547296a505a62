"""The default optimizer: AdamW whose moving numbers (learning rate, weight decay factor, bias corrections) reach the
device as one small tensor a step, so that no value of them is another graph and the step sends one transfer, not
hundreds.

Why not torch.optim.AdamW: its multi-tensor step (foreach=True) hands the learning rate, `1 - lr * weight_decay` and
every tensor's bias corrections to the foreach kernels as Python scalars, and torch_xla bakes a Python scalar into the
graph as a constant: a warm-up from 0, or a rate small enough that `1 - lr * weight_decay` rounds to 1.0, was then a
new graph. Sending every scalar as device data instead (xla/compilation.py) costs about 330 host-to-device transfers
and 500 graph parameters a step on the demo's model. Its capturable mode keeps the step count on the device, but
torch refuses it with foreach on XLA (`_get_capturable_supported_devices(supports_xla=False)` in torch/optim/adam.py
2.9) and its per-tensor path traced a third more graph. The update is torch's AdamW's (decoupled weight decay, then
Adam with bias correction); tests/test_adamw.py checks it against torch's.

The state keeps torch's layout (a CPU `step` tensor, `exp_avg`, `exp_avg_sq` per weight), so checkpoints, resume
and the FSDP sharded checkpoint treat it as they treat torch's.
"""

import math

import torch

from ..xla import device as devices


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def create_state(self) -> None:
        """Every weight's moments now, before the first step is traced (preparation.py calls it once the weights are
        on their devices). Made inside the first step, they came after that step's other new tensors in torch_xla's
        order of the graph's outputs, so the first step was a graph of its own, as large as every later step's
        (about 1 s of the demo's 2.2 s of compilation on XLA:CPU)."""
        for group in self.param_groups:
            for param in group["params"]:
                self._state(param)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # One row of moving numbers per (group, step count): weights that missed steps (no gradient then) have their
        # own count and bias corrections, and the groups their own weight decay (optimizers.parameter_groups).
        batches = {}
        for index, group in enumerate(self.param_groups):
            for param in group["params"]:
                if param.grad is not None:
                    state = self._state(param)
                    state["step"] += 1
                    batches.setdefault((index, int(state["step"].item())), []).append(param)
        if not batches:
            return loss
        # Computed on the host in float64, sent as one float32 tensor for every row: data, never graph constants, and
        # one transfer a step whatever the number of groups.
        rows = [self.moving_numbers(self.param_groups[index], step) for index, step in batches]
        moving = torch.tensor(rows, dtype=torch.float32).to(next(iter(batches.values()))[0].device)
        for row, ((index, _), params) in enumerate(batches.items()):
            self._update(self.param_groups[index], moving[row], params)
        return loss

    @staticmethod
    def moving_numbers(group: dict, step: int) -> list:
        """[1 - lr * weight_decay, lr / (1 - beta1^step), sqrt(1 - beta2^step)]: what moves from step to step (the
        whole JAX step, xla/jax_step.py, sends the same rows)."""
        beta1, beta2 = group["betas"]
        lr = group["lr"]
        return [1 - lr * group["weight_decay"], lr / (1 - beta1 ** step), math.sqrt(1 - beta2 ** step)]

    def _state(self, param) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = torch.tensor(0.0)  # on the host, as torch's non-capturable AdamW keeps it
            # As data from the host (sharded as the weight is), not zeros computed in a graph: those were constants of
            # the first step's graph, another reason it was a graph of its own.
            state["exp_avg"] = devices.zeros_like(param)
            state["exp_avg_sq"] = devices.zeros_like(param)
        return state

    def _update(self, group, moving, params: list) -> None:
        beta1, beta2 = group["betas"]
        decay, step_size, correction2_sqrt = moving[0], moving[1], moving[2]
        grads = [param.grad for param in params]
        exp_avgs = [self.state[param]["exp_avg"] for param in params]
        exp_avg_sqs = [self.state[param]["exp_avg_sq"] for param in params]
        # Out of place, then copied back: on XLA either is only a graph, but torch_xla 2.9 traces an in-place
        # foreach op per tensor, some through Python decompositions (lerp_, addcmul_: 6-9 ms a call for 80 tensors
        # on XLA:CPU), where the out-of-place ones and copy_ take 0.1-0.4 ms. The run's constants (betas, eps) stay
        # Python scalars: they never change within a run.
        new_exp_avgs = torch._foreach_lerp(exp_avgs, grads, 1 - beta1)
        new_exp_avg_sqs = torch._foreach_lerp(exp_avg_sqs, torch._foreach_mul(grads, grads), 1 - beta2)
        denominators = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(new_exp_avg_sqs), correction2_sqrt),
                                          group["eps"])
        updates = torch._foreach_mul(torch._foreach_div(new_exp_avgs, denominators), step_size)
        new_params = torch._foreach_sub(torch._foreach_mul(params, decay), updates)
        torch._foreach_copy_(exp_avgs, new_exp_avgs)
        torch._foreach_copy_(exp_avg_sqs, new_exp_avg_sqs)
        torch._foreach_copy_(params, new_params)
