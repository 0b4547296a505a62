"""The model as the whole JAX step (jax_step.py) traces it through torchax: what is changed while it runs there, and
put back after the trace. torch's autocast, FSDPv2's wrappers and torch_xla's activation checkpoint act on XLA
tensors, which the trace does not have: each is replaced by what means the same inside a JAX function.
"""

import contextlib

import torch


@contextlib.contextmanager
def autocast(env, dtype):
    """torchax's autocast with its policy table mended for the trace (the torchax of torch_xla 2.9's wheel): F.linear
    and torch.einsum run as JAX functions above the aten ops the table names, so every Linear stayed float32 (6 bf16
    dots of a BERT step against the lazy step's 30): cast as torch casts them. Softmax and log-softmax ran in bf16
    (a bf16 loss): float32, as torch's list has them. cat's and stack's "promote" reads `.dtype` of a list and fails
    (Qwen2's rotary embedding): dropped, JAX's concatenate promotes by itself. Restored after the trace."""
    import torchax.amp as amp

    table = amp.autocast_policy
    saved = dict(table)
    for function in (torch.nn.functional.linear, torch.einsum):
        table[function] = amp.CastPolicy.LOWER_PRECISION_FP
    for op in (torch.ops.aten._softmax.default, torch.ops.aten._log_softmax.default):
        table[op] = amp.CastPolicy.FP32  # torch's float32 list has them (torchax leaves their policy unwritten)
    for op in (torch.ops.aten.cat.default, torch.ops.aten.stack.default):
        table.pop(op, None)
    try:
        with amp.autocast("jax", dtype=dtype, env=env):
            yield
    finally:
        table.clear()
        table.update(saved)


@contextlib.contextmanager
def plain_forwards(model):
    """The model's own forwards while it is traced: torch.autocast("xla") does not reach inside a JAX function
    (torchax's autocast does that), and FSDPv2's wrappers mark their outputs' sharding with torch_xla calls, which
    torchax tensors refuse (the partitioner follows the weights' and the batch's shardings instead)."""
    swapped = []
    for module in model.modules():
        own = vars(module)
        if "_original_forward" in own and "forward" in own:  # precision.apply_to_model's (Accelerate's) mark
            swapped.append((module, own["forward"]))
            module.forward = own["_original_forward"]
        elif type(module).__name__ == "SpmdFullyShardedDataParallel":
            swapped.append((module, own.get("forward")))
            module.forward = _unwrapped(module)
    try:
        yield
    finally:
        for module, forward in swapped:
            if forward is None:
                del module.forward
            else:
                module.forward = forward


@contextlib.contextmanager
def recomputed_layers(model, env):
    """--gradient_checkpointing inside the JAX function: each layer transformers checkpoints (its
    `_gradient_checkpointing_func`, torch_xla's checkpoint in a lazy run, which torchax tensors refuse) runs under
    `jax.checkpoint`, so the backward pass recomputes its activations instead of keeping them. Its dropout masks are
    the ones the layer draws without checkpointing (torchax's key goes in and its successor comes out), in the forward
    and in the recomputation alike. transformers checkpoints only with torch's grad mode on: on for the trace."""
    import jax
    from torchax.interop import jax_view, torch_view

    def recomputed(function, *args):
        at = [index for index, value in enumerate(args) if isinstance(value, torch.Tensor)]

        def pure(arrays, key):
            given = list(args)
            for index, array in zip(at, arrays, strict=True):
                given[index] = torch_view(array)
            with env.override_property(prng=key):
                output = function(*given)
                return jax_view(output), env.param.prng

        output, env.param.prng = jax.checkpoint(pure)([jax_view(args[index]) for index in at], env.param.prng)
        return torch_view(output)

    layers = [module for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True
              and hasattr(module, "_gradient_checkpointing_func")]
    saved = [vars(module).get("_gradient_checkpointing_func") for module in layers]
    for module in layers:
        module._gradient_checkpointing_func = recomputed
    try:
        with torch.enable_grad() if layers else contextlib.nullcontext():
            yield
    finally:
        for module, function in zip(layers, saved, strict=True):
            module._gradient_checkpointing_func = function


def _unwrapped(wrapper):
    return lambda *args, **kwargs: wrapper.module(*args, **kwargs)


@contextlib.contextmanager
def scanned_layers(model, env, scan: bool):
    """The model's repeated layers as one `jax.lax.scan` over their stacked weights (`scan`; else nothing): XLA then
    compiles one layer's forward and backward instead of every layer's, which is what a TPU's compile time follows.
    For the trace, the list of layers reads as one callable that scans them all; each layer gets the same arguments
    (refused where they differ by layer: a model of sliding and full attention layers). Its dropout masks are drawn
    from keys split for the layers, not the sequence an unscanned forward draws."""
    if not scan:
        yield
        return
    import jax
    import jax.numpy as jnp
    from torchax.interop import jax_view, torch_view

    _, _, layers = repeated_layers(model)
    kinds = set(getattr(getattr(model, "config", None), "layer_types", None) or [None])
    if len(kinds) > 1:
        raise ValueError(f"scan_layers: the layers differ in kind ({', '.join(sorted(map(str, kinds)))}); each "
                         "scanned layer is handed the same arguments")
    each = list(layers)  # before the list reads as one scan below
    template = each[0]

    def scanned(hidden_states, *args, **kwargs):
        weights = [dict(layer.named_parameters()) for layer in each]
        stacked = {key: jnp.stack([jax_view(layer[key]) for layer in weights]) for key in weights[0]}
        keys = jax.random.split(env.param.prng, len(each) + 1)
        env.param.prng = keys[0]
        as_tuple = []

        def one(hidden, inputs):
            layer_weights, key = inputs
            with env.override_property(prng=key):
                output = torch.func.functional_call(template, torch_view(layer_weights), (torch_view(hidden), *args),
                                                    kwargs)
            as_tuple[:] = [isinstance(output, tuple)]
            return jax_view(output[0] if as_tuple[0] else output), None

        hidden, _ = jax.lax.scan(one, jax_view(hidden_states), (stacked, keys[1:]))
        return (torch_view(hidden),) if as_tuple[0] else torch_view(hidden)

    class OneScan(type(layers)):
        """The list as the model's forward walks it: one callable that runs every layer (its modules, by name, as
        they are: functional_call finds each weight where it was)."""

        def __getitem__(self, index):
            return [scanned] if isinstance(index, slice) else scanned

        def __iter__(self):
            return iter([scanned])

    kind = layers.__class__
    layers.__class__ = OneScan
    try:
        yield
    finally:
        layers.__class__ = kind


def repeated_layers(model) -> tuple:
    """(parent module, attribute name, the ModuleList) of the model's longest list of same-class layers."""
    best = None
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, torch.nn.ModuleList) and len({type(layer) for layer in child}) == 1:
                if best is None or len(child) > len(best[2]):
                    best = (parent, name, child)
    if best is None:
        raise ValueError(f"scan_layers: no list of repeated layers found in {type(model).__name__}")
    return best
