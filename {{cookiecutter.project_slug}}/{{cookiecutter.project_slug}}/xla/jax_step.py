"""The whole training step (forward, loss, backward, clipping, the project's AdamW) as one JAX function.

Why: torch_xla traces every op of a lazy step in Python, every step: measured on the CPU, 130 ms of host time a step
for bert-base's 201 tensors and 503 ms for Qwen2.5-0.5B's 291, longer than the chip needs for the step. Here the
model's loss is seen as a JAX function through torchax (`torch.func.functional_call` over torchax views of the
weights), differentiated by `jax.value_and_grad`, clipped and stepped by AdamW in `jax.numpy`; torch_xla lowers that
function once per input structure (`JaxCallable`) and replays it as one node of the lazy graph. A step's host work is
then flattening the inputs, one call and copying the results back into the weights and moments.

The optimizer stays the project's `loop.adamw.AdamW`: its param groups (lr read every call, as the scheduler sets
it), its state (`step` on the host, `exp_avg`, `exp_avg_sq` written in place), so checkpoints and resume read it as
they read the lazy step's. Its moving numbers reach the device as one float32 tensor, as AdamW.step sends them (AdamW.moving_numbers).
"""

import contextlib

import torch

from .device import device_values
from .model_in_trace import autocast, plain_forwards, recomputed_layers, scanned_layers
from .runtime import ready_for_a_jax_call
from .several_steps import SeveralSteps, seed_row, several_steps


class WholeStep(SeveralSteps):
    """The training step (forward, loss, backward, clipping, the project's AdamW update) as one JAX function, called
    through torch_xla as one graph node: `step(batch)` -> (loss, grad_norm or None), lazy and detached.

    `model`: the prepared module on the XLA device (peft-wrapped or not, FSDPv2-wrapped or not, its forward maybe
    wrapped in torch.autocast by precision.apply_to_model: the original forward runs, under torchax's autocast when
    `autocast_dtype` is given). `optimizer`: the project's AdamW, or Accelerate's wrapper around it.
    """

    def __init__(self, model, optimizer, max_grad_norm: float | None, autocast_dtype=None, accumulation: int = 1):
        from torch_xla.core.xla_builder import JaxCallable

        self.model, self.optimizer = model, getattr(optimizer, "optimizer", optimizer)
        self.max_grad_norm, self.accumulation = max_grad_norm, accumulation
        self.trainable, self.frozen = step_inputs(model)
        ready_for_a_jax_call([*self.trainable.values(), *self.frozen.values()])
        group_of = {id(p): index for index, group in enumerate(self.optimizer.param_groups) for p in group["params"]}
        missing = [name for name, p in self.trainable.items() if id(p) not in group_of]
        if missing:
            raise ValueError(f"trainable weights the optimizer does not step: {', '.join(missing[:5])}")
        self.groups = [group_of[id(p)] for p in self.trainable.values()]
        # Our own cache, not call_jax's module-level one: that one is keyed by the function's id and keeps every
        # function (and so its model's device weights) alive for the whole process.
        one = step_function(model, self.trainable, autocast_dtype)
        self.callable = JaxCallable(one)
        # --steps_per_execution: the same step scanned over several batches (several_steps.py).
        self.several_callable = JaxCallable(several_steps(one, [name for name, _ in model.named_buffers()]))
        self.spares = []  # the latest several-step call's batches: what a shorter call is padded with

    @torch.no_grad()
    def __call__(self, batch: dict) -> tuple:
        """One optimizer step: (loss, grad_norm or None), lazy. The caller steps the schedule after it."""
        device, names, keys, rows, states = self._count(1)
        moving = device_values([self._moving(group, step) for group, step in rows], torch.float32, device)
        # A new dropout mask every step, reproducible: torch's seed (set_seed) and the step count, as data. Derived
        # rather than drawn from torch's generator, so that the host's random stream (data order) is the lazy
        # step's, and a resumed run draws the masks the uninterrupted one would have.
        seed = device_values(seed_row(keys[0][1]), torch.int32, device)
        loss, norm, new, changed = self.callable(*self._inputs(names, states, batch, keys, rows), moving, seed,
                                                 *self._structure(names, keys, rows))
        self._write_back(names, states, new, changed)
        return loss, norm if self.max_grad_norm is not None else None

    def _count(self, steps: int) -> tuple:
        """Count `steps` steps in the optimizer's state (on the host, as AdamW.step counts: one call, not one per
        weight); (device, names, each weight's (group, first step count), the rows of moving numbers, the states)."""
        optimizer, params = self.optimizer, list(self.trainable.values())
        if any(not optimizer.state[p] for p in params):
            optimizer.create_state()
        states = [optimizer.state[p] for p in params]
        counts = [state["step"] for state in states]
        torch._foreach_add_(counts, 1)
        # One row of moving numbers per (group, step count): normally one row. Which row a weight reads is part of
        # the traced structure (a new combination retraces); the numbers themselves are data.
        keys = list(zip(self.groups, map(int, torch.stack(counts).tolist()), strict=True))
        if steps > 1:
            torch._foreach_add_(counts, steps - 1)
        return params[0].device, list(self.trainable), keys, sorted(set(keys)), states

    def _moving(self, group: int, step: int) -> list:
        return self.optimizer.moving_numbers(self.optimizer.param_groups[group], step)

    def _inputs(self, names, states, batch, keys, rows) -> tuple:
        """The weights, frozen weights, moments and batch (or batches), each keyed by name: the call flattens dicts in
        sorted-key order, not ours."""
        batches = [{name: _int32(t) for name, t in one.items()} for one in (batch if isinstance(batch, list) else [batch])]
        return (self.trainable, {name: _int32(t) for name, t in self.frozen.items()},
                {name: (s["exp_avg"], s["exp_avg_sq"]) for name, s in zip(names, states, strict=True)},
                batches if isinstance(batch, list) else batches[0])

    def _structure(self, names, keys, rows) -> tuple:
        constants = tuple((*self.optimizer.param_groups[g]["betas"], self.optimizer.param_groups[g]["eps"]) for g, _ in rows)
        return ({name: rows.index(key) for name, key in zip(names, keys, strict=True)}, constants, self.max_grad_norm,
                self.accumulation)

    def _write_back(self, names, states, new, changed) -> None:
        params = list(self.trainable.values())
        for index, targets in enumerate((params, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states])):
            torch._foreach_copy_(targets, [new[name][index] for name in names])
        if changed:  # buffers the forward changed in place (a step counter), as the lazy step leaves them
            torch._foreach_copy_([self.frozen[name] for name in changed], list(changed.values()))


def step_inputs(model) -> tuple[dict, dict]:
    """The step's weights by name: (trainable, frozen weights and buffers). A tied weight once: functional_call ties
    it back. Frozen weights and buffers go in as inputs too: a device tensor the function captured instead fails
    ("mixed math between XLATensor and torch.Tensor"); the TPU compile (tpu_compile.py) gives their shapes."""
    parameters = dict(model.named_parameters())
    trainable = {name: p for name, p in parameters.items() if p.requires_grad}
    frozen = {**{name: p for name, p in parameters.items() if not p.requires_grad}, **dict(model.named_buffers())}
    return trainable, frozen


def step_function(model, trainable: dict, autocast_dtype=None, scan_layers: bool = False):
    """The step in JAX, `(trainable, frozen, moments, batch, moving, seed, rows, constants, max_norm, accumulation=1)
    -> (loss, norm, {name: (weight, exp_avg, exp_avg_sq)}, {name: buffer the forward changed})`: traced once per input
    structure (shapes, dtypes, names, rows, constants, micro-batches). The run calls it through torch_xla (WholeStep);
    the plan compiles it for a TPU from shapes alone (tpu_compile.py). `model` may live on any device, the meta device
    included: only its code runs. `scan_layers`: the repeated layers as one scan (model_in_trace.scanned_layers)."""
    import jax
    import jax.numpy as jnp
    import torchax
    from torchax.interop import jax_view, torch_view

    # torch's embedding backward leaves the padding row's gradient 0; JAX's gradient of a gather does not know
    # that row, so it is zeroed by hand (else AdamW moves the pad token's vector, unlike the lazy step).
    name_of = {id(p): name for name, p in trainable.items()}
    padding_rows = {name_of[id(m.weight)]: m.padding_idx for m in model.modules()
                    if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None and id(m.weight) in name_of}
    env = torchax.default_env()

    buffers = [name for name, _ in model.named_buffers()]

    def function(trainable, frozen, moments, batch, moving, seed, rows, constants, max_norm, accumulation=1):
        # Dropout's masks from the "unsafe_rbg" generator (runtime.torchax_for_the_jax_step says why).
        key = jax.random.fold_in(jax.random.key(seed[0], impl="unsafe_rbg"), seed[1])

        def loss_of(weights, inputs, fixed, key):
            amp = autocast(env, autocast_dtype) if autocast_dtype else contextlib.nullcontext()
            # torchax's generator seeded for this trace only (override_property pops it after), so that no tracer
            # stays behind in the environment.
            with env, env.override_property(prng=key), amp, plain_forwards(model), recomputed_layers(model, env), \
                    scanned_layers(model, env, scan_layers):
                views = torch_view({**weights, **fixed})
                output = torch.func.functional_call(model, views, (), torch_view(inputs))
                # A buffer changed in place by the forward (a counter, BatchNorm's num_batches_tracked) holds another
                # array now: handed back and written into the model's, else the change would stay in the trace.
                changed = {name: jax_view(views[name]) for name in fixed if jax_view(views[name]) is not fixed[name]}
            return jax_view(output.loss).astype(jnp.float32), changed

        gradient = jax.value_and_grad(loss_of, has_aux=True)
        if accumulation == 1:
            (loss, changed), grads = gradient(trainable, batch, frozen, key)
        else:
            loss, grads, changed = _accumulated(gradient, trainable, frozen, batch, key, accumulation, buffers)
        for name, row in padding_rows.items():
            # A mask, not `.at[row].set(0)`: under SPMD, with the table split by rows, that update zeroed more than
            # the row (measured: the table's gradient norm 0.097 instead of 0.116 on 4 devices).
            rows_of = jnp.arange(grads[name].shape[0]).reshape((-1,) + (1,) * (grads[name].ndim - 1))
            grads[name] = jnp.where(rows_of == row, 0, grads[name])
        # torch.nn.utils.clip_grad_norm_: the norm of the per-tensor norms; scaled by max/(norm + 1e-6) capped at 1.
        norm = jnp.linalg.norm(jnp.stack([jnp.linalg.norm(g.ravel()) for g in grads.values()]))
        scale = jnp.minimum(max_norm / (norm + 1e-6), 1.0) if max_norm is not None else 1.0
        new = {}
        for name, grad in grads.items():
            (avg, sq), row = moments[name], rows[name]
            beta1, beta2, eps = constants[row]
            decay, step_size, correction2_sqrt = moving[row, 0], moving[row, 1], moving[row, 2]
            grad = grad * scale
            # AdamW._update's arithmetic: lerp the moments, then decay and step the weight.
            avg = avg + (1 - beta1) * (grad - avg)
            sq = sq + (1 - beta2) * (grad * grad - sq)
            update = avg / (jnp.sqrt(sq) / correction2_sqrt + eps) * step_size
            new[name] = (trainable[name] * decay - update, avg, sq)
        return loss, norm, new, changed

    return function


def _accumulated(gradient, trainable, frozen, batch, key, count: int, buffers: list):
    """--gradient_accumulation_steps inside the function: a `jax.lax.scan` over the batch's `count` micro-batches, each
    one's forward and backward in turn (so that one micro-batch's activations are held at a time), their gradients
    summed as the lazy step sums those of loss / count. Micro-batch i holds rows i, i + count, ... as
    micro_batch (data/batching.py) takes them (each chip's rows of every micro-batch stay on it), and draws its dropout
    masks from the step's key folded with i. The buffers the forward changes are carried from one to the next.
    Returns (the micro-batches' mean loss, the gradients, the buffers changed)."""
    import jax
    import jax.numpy as jnp

    micro = {name: jnp.swapaxes(rows.reshape((-1, count) + rows.shape[1:]), 0, 1) for name, rows in batch.items()}
    carried = {name: frozen[name] for name in buffers}
    touched = []  # the buffers the forward changes, found as the scan's body is traced

    def one(carry, inputs):
        summed, losses, kept = carry
        rows, index = inputs
        (loss, changed), grads = gradient(trainable, rows, {**frozen, **kept}, jax.random.fold_in(key, index))
        touched.extend(name for name in changed if name in kept and name not in touched)
        kept = {name: changed[name].astype(kept[name].dtype) if name in changed else kept[name] for name in kept}
        summed = jax.tree.map(lambda total, grad: total + grad / count, summed, grads)
        return (summed, losses + loss, kept), None

    zeros = jax.tree.map(jnp.zeros_like, trainable)
    (grads, total, kept), _ = jax.lax.scan(one, (zeros, jnp.zeros((), jnp.float32), carried),
                                           (micro, jnp.arange(count)))
    return total / count, grads, {name: kept[name] for name in touched}


def _int32(tensor):
    """int64 as int32. Why not jax's x64 mode: it is one switch for the whole process (every later JAX computation
    would change), and a TPU has no 64-bit integer units; token ids, labels and positions fit in int32."""
    return tensor.to(torch.int32) if tensor.dtype == torch.int64 else tensor
