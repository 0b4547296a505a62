"""Values on the device: which device it is, where a graph is cut, accumulators that do not recompile.

Nothing here touches an XLA device at import time: the notebook imports it in its device-free parent process.
"""


def uses_xla(device) -> bool:
    return getattr(device, "type", str(device)) == "xla"


def sync(device, wait: bool = False) -> None:
    """Cut the lazy graph here so that every step runs the same compiled program."""
    if uses_xla(device):
        import torch_xla

        torch_xla.sync(wait=wait)


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

    tensor = torch.tensor(values, dtype=dtype).to(device)
    if uses_xla(device):
        import torch_xla.runtime as xr

        if xr.is_spmd():
            import torch_xla.distributed.spmd as xs

            # Under SPMD a graph's outputs carry a sharding (a sum is replicated) and the sharding is part of
            # the graph: an accumulator fresh from the host must carry the same, or the step that first sees
            # a fresh one after a sharded one (the next epoch, the second eval batch) compiles again.
            xs.mark_sharding(tensor, xs.get_global_mesh(), (None,) * tensor.dim())
    return tensor
