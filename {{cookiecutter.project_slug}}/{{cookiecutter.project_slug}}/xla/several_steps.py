"""--steps_per_execution K: K optimizer steps in one call of the whole JAX step (xla/jax_step.py).

Why: the JAX step's host work is per call (flattening the weights, moments and batch, the call, copying the results
back), about 7-25 ms for the default models, while a v6e computes bert-base's 16 x 128 step in about 2.4 ms and a
TPU7x in about 1 ms: the chip waits. TPU software runs several steps per call for this (TPUEstimator's
iterations_per_loop, Keras' steps_per_execution); here the step's function is scanned (`jax.lax.scan`) over K batches
with the weights, moments and changed buffers carried, so the host's cost of K steps is about that of one call.

Each step reads its own row of moving numbers (its learning rate from the schedule at its step, its bias
corrections) and its own dropout key (the seed and its step count, as one step at a time draws them), so K steps give
what K calls give. A call with fewer real steps than K (an epoch's tail, the run's last steps, a log or checkpoint
due sooner) runs the same function with the rest masked: a masked step's results are dropped (`where`), its batch is
one the device already holds, so the call is the same graph.
"""

import torch

from .device import device_values


def seed_row(count: int) -> list:
    """A step's dropout key as data: torch's seed (set_seed) and the step's count."""
    return [torch.initial_seed() % (2 ** 31), count % (2 ** 31)]


def several_steps(one_step, buffers: list):
    """`one_step` (jax_step.step_function's function) scanned over K steps:
    `(trainable, frozen, moments, batches, moving, seeds, rows, constants, max_norm, accumulation=1)
    -> (losses[K], norms[K], the last real step's norm, {name: (weight, exp_avg, exp_avg_sq)}, {name: buffer changed})`.

    `batches`: K batches (dicts of arrays of one structure); `moving`: [K, rows, 3], each step's moving numbers;
    `seeds`: [K, 3] int32, each step's (seed, step count, 1 when the step is real, 0 when masked). `buffers`: the
    model's buffer names, carried from step to step (a forward may change one in place: a step counter)."""
    import jax
    import jax.numpy as jnp

    def function(trainable, frozen, moments, batches, moving, seeds, rows, constants, max_norm, accumulation=1):
        stacked = jax.tree.map(lambda *arrays: jnp.stack(arrays), *batches)
        carried = {name: frozen[name] for name in buffers}
        touched = []  # the buffers the forward changes, found as the scan's body is traced

        def step(carry, inputs):
            weights, moments_now, kept = carry
            batch, moving_now, seed = inputs
            loss, norm, new, changed = one_step(weights, {**frozen, **kept}, moments_now, batch, moving_now, seed[:2],
                                                rows, constants, max_norm, accumulation)
            touched.extend(name for name in changed if name in kept and name not in touched)
            real = seed[2] > 0

            def kept_unless_masked(value, before):
                return jnp.where(real, value.astype(before.dtype), before)

            weights = {name: kept_unless_masked(new[name][0], weights[name]) for name in weights}
            moments_now = {name: (kept_unless_masked(new[name][1], moments_now[name][0]),
                                  kept_unless_masked(new[name][2], moments_now[name][1])) for name in moments_now}
            kept = {name: kept_unless_masked(changed[name], kept[name]) if name in changed else kept[name]
                    for name in kept}
            return (weights, moments_now, kept), (loss, norm)

        (weights, moments_now, kept), (losses, norms) = jax.lax.scan(
            step, (trainable, moments, carried), (stacked, moving, seeds))
        last = jnp.maximum(jnp.sum(seeds[:, 2]) - 1, 0)
        new = {name: (weights[name], *moments_now[name]) for name in weights}
        return losses, norms, norms[last], new, {name: kept[name] for name in touched}

    return function


class SeveralSteps:
    """WholeStep's calls of several steps (its `_count`, `_inputs`, `_structure` and `_write_back` are the one step's)."""

    @torch.no_grad()
    def several(self, batches: list, scheduler, steps: int) -> tuple:
        """len(batches) <= `steps` optimizer steps in one call (--steps_per_execution, several_steps.py), stepping the
        schedule after each: (losses[steps], norms[steps], the last real step's norm or None, each real step's
        learning rate, the steps' mask as a device tensor: 1 real, 0 masked), lazy."""
        real = len(batches)
        if len(self.spares) < steps - real:  # no earlier call to pad with (the run's first call): a shorter scan
            steps = real
        device, names, keys, rows, states = self._count(real)
        rates, moving, seeds = [], [], []
        for index in range(steps):
            if index < real:
                rates.append(self.optimizer.param_groups[0]["lr"])
                moving.append([self._moving(group, step + index) for group, step in rows])
                scheduler.step()
            else:
                moving.append(moving[-1])
            seeds.append([*seed_row(keys[0][1] + index), int(index < real)])
        moving = device_values(moving, torch.float32, device)
        seeds = device_values(seeds, torch.int32, device)
        batches = padded(batches, self.spares, steps)  # there are enough: `steps` was cut to the spares above
        losses, norms, last, new, changed = self.several_callable(
            *self._inputs(names, states, batches, keys, rows), moving, seeds, *self._structure(names, keys, rows))
        self._write_back(names, states, new, changed)
        self.spares = batches
        return losses, norms, last if self.max_grad_norm is not None else None, rates, seeds[:, 2]


def padded(batches: list, spares: list, steps: int) -> list:
    """`batches` made up to `steps` with batches the device already holds (`spares`, an earlier call's): distinct
    tensors of the same shapes and shardings, so the call is the graph a full one is (the same tensor twice, or a new
    one made on the device, would be another graph). Their steps are masked."""
    missing = steps - len(batches)
    return [*batches, *spares[len(spares) - missing:]] if missing else list(batches)
