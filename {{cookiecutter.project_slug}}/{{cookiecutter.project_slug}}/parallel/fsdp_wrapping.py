"""Wrapping a model in FSDPv2: which layer class is wrapped one by one, and how each forward's output is split.

Each instance of one repeated layer class is wrapped separately, so that only the layer that runs is
gathered whole; each wrapped forward's output is split along the mesh axis `fsdp`, so that activations
stay sharded by batch between layers. The layout (fsdp.py) calls `wrap_model` once it has its mesh.
"""

import torch

from ..config import ConfigError
from ..models.modeling import enable_gradient_checkpointing
from ..xla import sharding

AXIS = "fsdp"  # the one mesh axis every chip lies on


def wrap_model(model, mesh, layer_name: str | None, gradient_checkpointing: bool):
    """FSDPv2 around each repeated layer, then around the whole model (which moves it to the devices)."""
    layer = layer_class(model, layer_name)
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return sharding.fsdp_v2(model, mesh, layer, shard_output)


def shard_output(output, mesh) -> None:
    """Split a forward's output along the batch axis (the logits of a model output; a layer's first tensor)."""
    if isinstance(output, torch.Tensor):
        tensor = output
    elif getattr(output, "logits", None) is not None:
        tensor = output.logits
    else:
        tensor = output[0]
    sharding.shard_first_dim(tensor, mesh, AXIS)


def layer_class(model, name: str | None = None) -> type:
    """The class FSDPv2 wraps one by one: the named one, the model's `_no_split_modules`, or its repeated block."""
    classes = {type(module).__name__: type(module) for module in model.modules()}
    if name:
        if name not in classes:
            raise ConfigError(
                f"fsdp_layer_class={name!r}: {type(model).__name__} has no such module; "
                f"its classes include {', '.join(sorted(classes)[:12])}"
            )
        return classes[name]
    # Of the classes transformers keeps whole (`_no_split_modules`), the one the model repeats most.
    counts = {}
    for module in model.modules():
        if type(module).__name__ in (getattr(model, "_no_split_modules", None) or []):
            counts[type(module)] = counts.get(type(module), 0) + 1
    if counts:
        return max(counts, key=counts.get)
    # The class of the longest list of same-class blocks (BERT's encoder.layer, GPT-2's h, ...).
    best, length = None, 0
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > length:
            kinds = {type(block) for block in module}
            if len(kinds) == 1:
                best, length = kinds.pop(), len(module)
    if best is None:
        raise ConfigError(
            f"parallelism='fsdp': no repeated layer found in {type(model).__name__} to shard one by one; "
            "pass --fsdp_layer_class with the class name of its blocks"
        )
    return best
