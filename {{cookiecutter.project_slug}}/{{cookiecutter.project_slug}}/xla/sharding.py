"""SPMD: one mesh over every chip, sharding annotations, FSDPv2's wrapper and the input loader that shards batches.

What the FSDPv2 layout (parallel/fsdp.py, fsdp_wrapping.py) asks of torch_xla, and nothing else.
"""

import functools
import math
import re

import numpy as np


def start_spmd(axis: str):
    """Switch the runtime to SPMD and lay every chip of the job on one mesh axis; returns the mesh."""
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), (devices,), (axis,))
    xs.set_global_mesh(mesh)
    return mesh


def addressable_devices() -> int:
    """The chips this process (this host) feeds."""
    import torch_xla.runtime as xr

    return xr.addressable_runtime_device_count()


def shard_first_dim(tensor, mesh, axis: str) -> None:
    """Split `tensor` along its first dimension over the mesh axis; every other dimension whole."""
    import torch_xla.distributed.spmd as xs

    xs.mark_sharding(tensor, mesh, (axis,) + (None,) * (tensor.dim() - 1))


def replicate_under_spmd(tensor) -> None:
    """Under SPMD, mark `tensor` replicated on every chip (what a graph's reduced outputs carry); else nothing."""
    import torch_xla.runtime as xr

    if xr.is_spmd():
        import torch_xla.distributed.spmd as xs

        xs.mark_sharding(tensor, xs.get_global_mesh(), (None,) * tensor.dim())


def fsdp_v2(model, mesh, layer_class: type, shard_output):
    """FSDPv2 around each instance of `layer_class`, then around the whole model (which moves it to the devices)."""
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

    return SpmdFullyShardedDataParallel(
        model, mesh=mesh, shard_output=shard_output,
        auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer_class}),
    )


def sharded_loader(loader, mesh, axis: str, sample: dict):
    """Batches (dicts) sent to the devices, every field split along its first dimension; each host sends its share."""
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.spmd as xs

    sharding = {key: xs.ShardingSpec(mesh, (axis,) + (None,) * (tensor.dim() - 1)) for key, tensor in sample.items()}
    return pl.MpDeviceLoader(loader, torch_xla.device(), input_sharding=sharding)


def local_shard_indices(tensor) -> list:
    """(device, index ranges) of each of this host's shards of `tensor`; Ellipsis for a replicated one."""
    import torch_xla

    return [indices for _, indices in torch_xla._XLAC._get_local_shard_replica_and_indices([tensor])[0]]


def sharded_zeros_like(tensor):
    """Zeros shaped, typed and sharded like `tensor` (on an XLA device), sent from the host as data: each of this
    host's chips receives only its own shard, never the whole tensor; no graph computes them. None when `tensor` is
    not split over chips (device.zeros_like sends those whole)."""
    import torch
    import torch_xla

    spec = torch_xla._XLAC._get_xla_sharding_spec(tensor)  # "" when not sharded
    if not spec or "replicated" in spec:
        return None
    # A tiled sharding reads "{devices=[4,1]0,1,2,3}": tiles per dimension (then any replicated tile dimension).
    tiles = [int(count) for count in re.search(r"devices=\[([\d,]+)\]", spec).group(1).split(",")][:tensor.dim()]
    shard = torch.zeros([math.ceil(size / count) for size, count in zip(tensor.shape, tiles, strict=True)], dtype=tensor.dtype)
    local_chips = len(torch_xla._XLAC._xla_get_runtime_devices())
    return torch_xla._XLAC._global_tensor_from_cpu_shards(
        [shard] * local_chips, torch_xla._XLAC._get_xla_op_sharding(tensor), list(tensor.shape))
