"""FSDPv2's sharded checkpoint: each device writes and reads only its own shards, so no host holds the whole model.

`torch.distributed.checkpoint` with torch_xla's SPMD planners writes the model's and optimizer's shards
into one folder; the scheduler and the random states, the same on every host, go beside it in one file
written by the main process. The export is made the same way: every host writes its shards of the weights,
and one host reads them all back into whole tensors on its CPU (`read_weights_sharded`), where a gather on
the devices would need every shard addressable from one host, which on a pod they are not.
"""

import random
from pathlib import Path

import numpy as np
import torch

from ..fault_tolerance.safe_loading import check_dcp_metadata, load_plain, refused_in_shards
from ..models.lora import trainable_state
from ..xla import checkpoint, runtime

SHARDED = "sharded"  # the torch.distributed.checkpoint folder inside a checkpoint
HOST_STATE = "host_state.pt"  # scheduler and random states, the same on every host, as tensors and plain data


def _state(model, optimizer) -> dict:
    # keep_vars: the parameters themselves, so that loading writes into them and keeps their sharding.
    weights = model.state_dict(keep_vars=True)
    if any(not parameter.requires_grad for parameter in model.parameters()):
        # LoRA (models/lora.py): a frozen base is not saved, only what trains; the base comes back from where it was built.
        weights = trainable_state(model, weights)
    return {"model": weights, "optimizer": optimizer.state_dict()}


def save_sharded(model, optimizer, scheduler, folder: Path, main_process: bool) -> None:
    """Each device's shards (torch.distributed.checkpoint), plus the scheduler and random states."""
    seed = runtime.rng_state()  # the save syncs the graph, which advances the seed: keep the run's stream
    _write_shards(_state(model, optimizer), folder / SHARDED)
    runtime.set_rng_state(seed)
    if main_process:
        torch.save(host_state(scheduler, seed), folder / HOST_STATE)


def host_state(scheduler, xm_seed: int) -> dict:
    """What HOST_STATE holds: the scheduler's state and every random state of this process."""
    return {"scheduler": scheduler.state_dict(), "xm_seed": xm_seed, "torch": torch.get_rng_state(),
            "numpy": _numpy_state(), "python": random.getstate()}


def _numpy_state() -> dict:
    """numpy's random state as a tensor and plain numbers: its key array pickled would need numpy's classes, and
    HOST_STATE is read back weights-only with no allow-list (fault_tolerance/safe_loading.py)."""
    name, key, position, has_gauss, cached_gaussian = np.random.get_state()
    return {"name": name, "key": torch.from_numpy(key.astype(np.int64)), "position": int(position),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}


def _set_numpy_state(state: dict) -> None:
    np.random.set_state((state["name"], state["key"].numpy().astype(np.uint32), state["position"],
                         state["has_gauss"], state["cached_gaussian"]))


def load_sharded(model, optimizer, scheduler, folder: Path) -> None:
    """Read a checkpoint written by `save_sharded` into the live (sharded) tensors and restore the random states."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    # Both files checked first: a refused one stops the run before anything it holds is read or any state changes.
    check_dcp_metadata(folder / SHARDED)  # before DCP unpickles it unrestricted
    host = load_plain(folder / HOST_STATE)
    if not optimizer.state:
        # The checkpoint is loaded into existing tensors: create the optimizer's state first.
        checkpoint.prime_optimizer(optimizer)
    state = _state(model, optimizer)
    try:
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder / SHARDED)),
                 planner=checkpoint.load_planner(), no_dist=not dist.is_initialized())
    except dcp.api.CheckpointException as error:  # the planner reads the non-tensor entries with torch.load: weights-only
        refused = refused_in_shards(folder / SHARDED, error)
        if refused is None:
            raise
        raise refused from None
    optimizer.load_state_dict(state["optimizer"])
    # prime_optimizer made the state by a step over zero gradients, which it leaves on the parameters. Kept, the
    # resumed run's first backward would add to them, another graph than the uninterrupted run's step (with its
    # shardings already fixed), and with gradient clipping the norm's sum over the shards came out an ulp apart.
    optimizer.zero_grad(set_to_none=True)
    scheduler.load_state_dict(host["scheduler"])
    runtime.set_rng_state(host["xm_seed"])
    torch.set_rng_state(host["torch"])
    _set_numpy_state(host["numpy"])
    random.setstate(host["python"])


def save_weights_sharded(model, folder: Path) -> None:
    """The model's weights only, each device's shards written by its own host (every host calls this)."""
    _write_shards(model.state_dict(keep_vars=True), folder)


def _write_shards(state: dict, folder: Path) -> None:
    """Each addressable device's shards of `state`, written by this host; the hosts' plans agree over their group."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(folder)), planner=checkpoint.save_planner(),
             no_dist=not dist.is_initialized())


def read_weights_sharded(folder: Path) -> dict:
    """Whole CPU tensors from a folder written by `save_weights_sharded`, every host's shards put together.

    One process alone (no collective): the checkpoint's own metadata gives each tensor's shape and dtype,
    and torch.distributed.checkpoint reads every shard that overlaps it into place.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    check_dcp_metadata(folder)  # before DCP unpickles it unrestricted
    reader = dcp.FileSystemReader(str(folder))
    weights = {
        name: torch.empty(entry.size, dtype=entry.properties.dtype)
        for name, entry in reader.read_metadata().state_dict_metadata.items()
        if isinstance(entry, TensorStorageMetadata)
    }
    dcp.load(weights, storage_reader=reader, no_dist=True)
    return weights
