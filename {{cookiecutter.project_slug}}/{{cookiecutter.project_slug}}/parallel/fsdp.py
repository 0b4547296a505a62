"""The FSDPv2 layout: PyTorch/XLA SPMD, one process per host, everything sharded over one mesh axis `fsdp`.

Each parameter is split along its largest dimension over all chips (the optimizer's state follows it),
the model's repeated layers are wrapped one by one (so each is gathered only while it runs), and every
batch is split along its first dimension. The global batch is train_batch_size x chips. To the loop this
looks like one process: XLA's SPMD partitioner adds the collectives.

Accelerate has no FSDPv2 path (its FSDP plugin refuses XLA), so the model is wrapped here and the loaders
are Accelerate's host-side ones (seedable sampler, one share per host) fed through torch_xla's device loader
with an input sharding. Checkpoints are sharded: `torch.distributed.checkpoint` with torch_xla's SPMD planners
writes each device's shards, so no host ever holds the whole model.
"""

import functools
import random
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError
from ..modeling import enable_gradient_checkpointing

AXIS = "fsdp"
SHARDED = "sharded"  # the torch.distributed.checkpoint folder inside a checkpoint
HOST_STATE = "host_state.pt"  # scheduler and random states, the same on every host


class FsdpV2:
    name = "fsdp"

    def __init__(self, config):
        self.config = config
        self.mesh = None
        self.model = self.optimizer = self.scheduler = None

    # -- before the first tensor reaches a device --------------------------------------------------

    def start(self) -> None:
        """Switch the runtime to SPMD and lay every chip of the job on the `fsdp` axis."""
        from ..runtime import xla_installed

        if not xla_installed():
            raise ConfigError("parallelism='fsdp' needs PyTorch/XLA (SPMD): install torch_xla, or use parallelism='data'")
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        xr.use_spmd()
        devices = xr.global_runtime_device_count()
        self.mesh = xs.Mesh(np.arange(devices), (devices,), (AXIS,))
        xs.set_global_mesh(self.mesh)
        if xr.process_count() > 1:
            # Several hosts write their own shards of a checkpoint: torch.distributed.checkpoint coordinates
            # them over a host-side process group (PyTorch/XLA's documented multi-host recipe).
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group("gloo", init_method="xla://")

    def devices(self) -> int:
        return int(self.mesh.size())

    def devices_per_process(self) -> int:
        """A host's loader batch feeds all of its own chips."""
        import torch_xla.runtime as xr

        return xr.addressable_runtime_device_count()

    def replicas(self, accelerator) -> int:
        return self.devices()

    def loader_shards(self, accelerator) -> int:
        import torch_xla.runtime as xr

        return xr.process_count()

    def scheduler_calls_per_step(self, accelerator) -> int:
        return 1  # the scheduler is not Accelerate's: it steps once per optimizer step

    # -- the model -----------------------------------------------------------------------------------

    def wrap(self, model):
        """FSDPv2 around each repeated layer, then around the whole model (which moves it to the devices)."""
        from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
        from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel

        layer = layer_class(model, self.config.fsdp_layer_class)
        if self.config.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        self.model = SpmdFullyShardedDataParallel(
            model, mesh=self.mesh, shard_output=shard_output,
            auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={layer}),
        )
        return self.model

    # -- optimizer, scheduler, loaders -------------------------------------------------------------

    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        """Host-side loaders from Accelerate (seedable shuffle, one share per host); the rest stays as given.

        Not `accelerator.prepare`: under SPMD it sees one process and would copy every batch whole to
        every chip, and its optimizer wrapper would add an all-reduce that FSDPv2 does not need.
        """
        import torch_xla.runtime as xr
        from accelerate.data_loader import prepare_data_loader

        hosts, host = xr.process_count(), xr.process_index()

        def host_side(loader, **options):
            prepared = prepare_data_loader(loader, num_processes=hosts, process_index=host, put_on_device=False, **options)
            # On XLA Accelerate always wraps its loader in a device loader that copies each batch whole; the
            # host-side loader inside it (`_loader`) is what the sharded device loader below is given instead.
            return getattr(prepared, "_loader", prepared)

        train_loader = host_side(train_loader, use_seedable_sampler=True, data_seed=self.config.seed)
        eval_loader = host_side(eval_loader)
        self.optimizer, self.scheduler = optimizer, scheduler
        return model, optimizer, train_loader, eval_loader, scheduler

    def train_batches(self, accelerator, train_loader, epoch: int, skip: int):
        from accelerate.data_loader import SkipBatchSampler
        from torch.utils.data import DataLoader

        train_loader.set_epoch(epoch)  # the seedable sampler's order depends on (seed, epoch) only
        loader = train_loader
        if skip:
            # The same order as the uninterrupted epoch, its first batches left out (Accelerate's sampler).
            loader = DataLoader(
                train_loader.dataset, batch_sampler=SkipBatchSampler(train_loader.batch_sampler, skip),
                collate_fn=train_loader.collate_fn,
            )
        return self._on_devices(loader)

    def eval_batches(self, eval_loader):
        return self._on_devices(eval_loader)

    def _on_devices(self, loader):
        import torch_xla
        import torch_xla.distributed.parallel_loader as pl
        import torch_xla.distributed.spmd as xs

        # Every field of a batch split along its first (batch) dimension; each host sends only its chips' shards.
        sample = loader.collate_fn([loader.dataset[0]])
        sharding = {key: xs.ShardingSpec(self.mesh, (AXIS,) + (None,) * (tensor.dim() - 1)) for key, tensor in sample.items()}
        return pl.MpDeviceLoader(_AsDicts(loader), torch_xla.device(), input_sharding=sharding)

    # -- checkpoints ---------------------------------------------------------------------------------

    def _state(self) -> dict:
        # keep_vars: the parameters themselves, so that loading writes into them and keeps their sharding.
        return {"model": self.model.state_dict(keep_vars=True), "optimizer": self.optimizer.state_dict()}

    def save_state(self, accelerator, folder: Path) -> None:
        """Each device's shards (torch.distributed.checkpoint), plus the scheduler and random states."""
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        import torch_xla.core.xla_model as xm
        from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

        seed = xm.get_rng_state()  # the save syncs the graph, which advances the seed: keep the run's stream
        dcp.save(self._state(), storage_writer=dcp.FileSystemWriter(str(folder / SHARDED)),
                 planner=SPMDSavePlanner(), no_dist=not dist.is_initialized())
        xm.set_rng_state(seed)
        if accelerator.is_main_process:
            torch.save({
                "scheduler": self.scheduler.state_dict(), "xm_seed": seed, "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(), "python": random.getstate(),
            }, folder / HOST_STATE)

    def load_state(self, accelerator, folder: Path) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        import torch_xla.core.xla_model as xm
        from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner, prime_optimizer

        if not self.optimizer.state:
            # The checkpoint is loaded into existing tensors: create the optimizer's state first.
            prime_optimizer(self.optimizer)
        state = self._state()
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder / SHARDED)),
                 planner=SPMDLoadPlanner(), no_dist=not dist.is_initialized())
        self.optimizer.load_state_dict(state["optimizer"])
        host = torch.load(folder / HOST_STATE, weights_only=False)
        self.scheduler.load_state_dict(host["scheduler"])
        xm.set_rng_state(host["xm_seed"])
        torch.set_rng_state(host["torch"])
        np.random.set_state(host["numpy"])
        random.setstate(host["python"])

    def release(self) -> None:
        self.model = self.optimizer = self.scheduler = None

    def host_state_dict(self, accelerator) -> dict:
        """The whole weights on the host, under the model's own names (FSDPv2 prefixes every wrapped module's)."""
        return {
            name.replace("_orig_module.", ""): tensor.detach().cpu() for name, tensor in self.model.state_dict().items()
        }

    def plain_model(self, accelerator):
        return self.model.module

    # -- the report ----------------------------------------------------------------------------------

    def describe(self, accelerator, optimizer, bytes_of) -> dict:
        """What each device holds, read from the shards of every parameter and optimizer state tensor."""
        parameters = list(self.model.parameters())
        states = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
        held_parameters, whole_parameters = _bytes_per_device(parameters, bytes_of)
        held_states, whole_states = _bytes_per_device(states, bytes_of)
        return {
            "parallelism": self.name,
            "devices": self.devices(),
            "mesh": {AXIS: self.devices()},
            "parameter_bytes_per_device": max(held_parameters),
            "parameter_bytes": whole_parameters,
            "parameter_bytes_by_device": held_parameters,
            "optimizer_bytes_per_device": max(held_states),
            "optimizer_bytes": whole_states,
            "optimizer_bytes_by_device": held_states,
            "bytes_from": "the index ranges of each device's shard of every tensor (torch_xla), the largest device",
        }


def _bytes_per_device(tensors, bytes_of) -> tuple[list[int], int]:
    """(bytes held by each local device, bytes of the whole tensors) from the shards' index ranges."""
    import torch_xla

    held, whole = {}, 0
    for tensor in tensors:
        whole += bytes_of(tensor, tensor.numel())
        shards = torch_xla._XLAC._get_local_shard_replica_and_indices([tensor])[0]
        for device, (_, indices) in enumerate(shards):
            if indices is Ellipsis:  # replicated: this device holds all of it
                elements = tensor.numel()
            else:
                elements = int(np.prod([len(range(*index.indices(size))) for index, size in zip(indices, tensor.shape, strict=True)]))
            held[device] = held.get(device, 0) + bytes_of(tensor, elements)
    return [held[device] for device in sorted(held)] or [0], whole


class _AsDicts:
    """A loader whose batches are plain dicts: torch_xla's per-field input sharding takes dicts only."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield dict(batch)


def shard_output(output, mesh) -> None:
    """Split a forward's output along the batch axis (the logits of a model output; a layer's first tensor)."""
    import torch_xla.distributed.spmd as xs

    if isinstance(output, torch.Tensor):
        tensor = output
    elif getattr(output, "logits", None) is not None:
        tensor = output.logits
    else:
        tensor = output[0]
    xs.mark_sharding(tensor, mesh, (AXIS,) + (None,) * (tensor.dim() - 1))


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
