"""The XLA device: which device it is, where a graph is cut, accumulators that do not recompile, reads to the host.

Nothing here touches an XLA device at import time: the notebook imports it in its device-free parent process.
"""

from .sharding import replicate_under_spmd, sharded_zeros_like


def uses_xla(device) -> bool:
    return getattr(device, "type", str(device)) == "xla"


def sync(device, wait: bool = False) -> None:
    """Cut the lazy graph here so that every step runs the same compiled program."""
    if uses_xla(device):
        import torch_xla

        torch_xla.sync(wait=wait)


def discard_traced(device) -> None:
    """Drop what was traced since the last sync without compiling or running it. For measuring tracing alone
    (benchmarks/measure_host_tracing.py), where compiling a full-depth step would cost more than the measurement:
    a tensor updated in place since the sync is left a placeholder of its shape, without a value (reading it fails,
    tracing on it traces the same graph again). A training step must sync instead."""
    import torch_xla

    torch_xla._XLAC._clear_pending_irs(str(device))


def current_device():
    """This process's XLA device (under SPMD: the one virtual device every chip stands behind)."""
    import torch_xla

    return torch_xla.device()


def device_kind(device) -> str:
    """'TPU', 'CPU', 'CUDA'... for an XLA device; the torch device type otherwise."""
    if uses_xla(device):
        import torch_xla.runtime as xr

        return f"xla:{xr.device_type()}"
    return str(getattr(device, "type", device))


def device_zeros(size: int, dtype, device):
    """A zero accumulator that reaches the device as data, not as a graph constant."""
    return device_values([0] * size, dtype, device)


def device_values(values: list, dtype, device):
    """An accumulator with these starting values that reaches the device as data, not as a graph constant.

    A 0-d tensor would be folded into the next graph as a constant, making the first
    step's graph differ from every later one (one extra compilation).
    """
    import torch

    return _as_data(torch.tensor(values, dtype=dtype), device)


def _as_data(host_tensor, device):
    """`host_tensor` sent to `device`; under SPMD marked replicated.

    Under SPMD a graph's outputs carry a sharding (a sum is replicated) and the sharding is part of the graph: a
    tensor fresh from the host must carry the same, or the step that first sees a fresh one after a graph's output
    (the next epoch, the second eval batch, the second optimizer step) compiles again.
    """
    tensor = host_tensor.to(device)
    if uses_xla(device):
        replicate_under_spmd(tensor)
    return tensor


def zeros_like(tensor):
    """Zeros like `tensor`; on an XLA device sent as data, sharded as it is (sharding.sharded_zeros_like), never a
    graph constant: an optimizer state made of constants in its first step makes that step a graph of its own.
    (Sent unmarked, an unsharded weight's moments made FSDPv2's second step another graph on one chip.)"""
    import torch

    if not uses_xla(tensor.device):
        return torch.zeros_like(tensor)
    sharded = sharded_zeros_like(tensor)
    return sharded if sharded is not None else _as_data(torch.zeros(tensor.shape, dtype=tensor.dtype), tensor.device)


def readable_later(tensor):
    """`tensor`, an output of the graph being traced that the host reads after later graphs ran: under SPMD made whole
    on every chip by that same graph (replicated), else as it is. On several hosts a shard on another host's chip cannot
    be read, and gathering it after the loop would be a graph of its own. It must be computed by the graph: a batch's
    field as the loader sent it is data, whose sharding would be replaced through the host."""
    if uses_xla(tensor.device):
        replicate_under_spmd(tensor)
    return tensor


def to_host(tensors: list) -> list:
    """The tensors on the host's CPU, all in one transfer (torch_xla's batched read; `.tolist()` on each would be a
    transfer each). Tensors already computed move without a compilation."""
    tensors = list(tensors)
    if tensors and uses_xla(tensors[0].device):
        import torch_xla

        return torch_xla._XLAC._xla_get_cpu_tensors(tensors)
    return [tensor.cpu() for tensor in tensors]


def memory_per_chip(device) -> int | None:
    """The bytes one chip offers a program (torch_xla's bytes_limit), where the device says: a TPU does; XLA:CPU
    answers UNIMPLEMENTED ("GetAllocatorStats is not supported"), and a device that is not XLA has none here."""
    if not uses_xla(device):
        return None
    import torch_xla.core.xla_model as xm

    try:
        limit = xm.get_memory_info(device).get("bytes_limit")
    except RuntimeError:
        return None
    return int(limit) if limit else None
