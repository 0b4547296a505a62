"""The FSDPv2 layout: PyTorch/XLA SPMD, one process per host, everything sharded over one mesh axis `fsdp`.

Each parameter is split along its largest dimension over all chips (the optimizer's state follows it),
the model's repeated layers are wrapped one by one (so each is gathered only while it runs), and every
batch is split along its first dimension. The global batch is train_batch_size x chips. To the loop this
looks like one process: XLA's SPMD partitioner adds the collectives.

Accelerate has no FSDPv2 path (its FSDP plugin refuses XLA), so the model is wrapped here and the loaders
are Accelerate's host-side ones (seedable sampler, one share per host) fed through torch_xla's device loader
with an input sharding. The layer class wrapped one by one and the output's sharding are fsdp_wrapping.py's;
the sharded checkpoints (no host ever holds the whole model) are fsdp_checkpoint.py's.
"""

import shutil
from pathlib import Path

import numpy as np
import torch

from ..config import ConfigError
from ..config.groups import ModelOptions, ParallelismOptions
from ..launch import hosts
from ..launch.processes import barrier, is_main
from ..xla import runtime, sharding
from .fsdp_checkpoint import load_sharded, read_weights_sharded, save_sharded, save_weights_sharded
from .fsdp_wrapping import AXIS, wrap_model
from .layout import Layout


class FsdpV2(Layout):
    name = "fsdp"
    files = "sharded: one process per host"

    def __init__(self, parallel: ParallelismOptions, model: ModelOptions):
        self.options, self.model_options = parallel, model
        self.mesh = self.host = None
        self.model = self.optimizer = self.scheduler = None

    # -- before the first tensor reaches a device --------------------------------------------------

    def start(self) -> None:
        """Switch the runtime to SPMD and lay every chip of the job on the `fsdp` axis."""
        if not runtime.installed():
            raise ConfigError("parallelism='fsdp' needs PyTorch/XLA (SPMD): install torch_xla, or use parallelism='data'")
        self.mesh = sharding.start_spmd(AXIS)
        self.host = hosts.this_host()
        if self.host.count > 1:
            # Several hosts: decisions, barriers and torch.distributed.checkpoint's plans go over a host-side
            # gloo group (PyTorch/XLA's documented multi-host recipe), and only host 0 writes shared files.
            hosts.join(self.host)

    def devices(self) -> int:
        return int(self.mesh.size())

    def devices_per_process(self) -> int:
        """A host's loader batch feeds all of its own chips."""
        return sharding.addressable_devices()

    def replicas(self, accelerator) -> int:
        """Per-chip batches in one step: each host's loader batch feeds its own chips (the mesh's size on a pod,
        where every host has the same chips; counted from what the loaders feed, which a simulated pod keeps true)."""
        return self.devices_per_process() * self.host.count

    def loader_shards(self, accelerator) -> int:
        return self.host.count

    def scheduler_calls_per_step(self, accelerator) -> int:
        return 1  # the scheduler is not Accelerate's: it steps once per optimizer step

    def clip_gradients(self, accelerator, model, max_norm: float):
        """Clip the gradients' global norm; returns the norm before. Under SPMD each gradient is one logical tensor
        sharded over every chip, so torch's own clipping computes the norm over all of them in the step's graph."""
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    # -- the model -----------------------------------------------------------------------------------

    def wrap(self, model):
        """FSDPv2 around each repeated layer, then around the whole model (which moves it to the devices)."""
        self.model = wrap_model(model, self.mesh, self.options.fsdp_layer_class,
                                self.model_options.gradient_checkpointing)
        return self.model

    # -- optimizer, scheduler, loaders -------------------------------------------------------------

    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        """Host-side loaders from Accelerate (seedable shuffle, one share per host); the rest stays as given.

        Not `accelerator.prepare`: under SPMD it sees one process and would copy every batch whole to
        every chip, and its optimizer wrapper would add an all-reduce that FSDPv2 does not need.
        """
        # The run's seed, as the run's Accelerator holds it (data/batching.shuffle_config): the data layout's shuffle too.
        seed = accelerator.dataloader_config.data_seed
        train_loader = self._host_side(train_loader, use_seedable_sampler=True, data_seed=seed)
        eval_loader = self._host_side(eval_loader)
        self.optimizer, self.scheduler = optimizer, scheduler
        return model, optimizer, train_loader, eval_loader, scheduler

    def prepare_prediction(self, accelerator, model, loader):
        """predict.py: the model wrapped as in training (its layers sharded over the chips), this host's batches."""
        return self.wrap(model), self._host_side(loader)

    def _host_side(self, loader, **options):
        from accelerate.data_loader import prepare_data_loader

        prepared = prepare_data_loader(loader, num_processes=self.host.count, process_index=self.host.index,
                                       put_on_device=False, **options)
        # On XLA Accelerate always wraps its loader in a device loader that copies each batch whole; the
        # host-side loader inside it (`_loader`) is what the sharded device loader below is given instead.
        return getattr(prepared, "_loader", prepared)

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

    def _on_devices(self, loader, sample=None):
        """The loader's batches on the chips, every field split along its first (batch) dimension; each host sends
        only its chips' shards. `sample`: a batch of the loader's shape (its first example's, unless given)."""
        sample = loader.collate_fn([loader.dataset[0]]) if sample is None else sample
        return sharding.sharded_loader(_AsDicts(loader), self.mesh, AXIS, sample)

    # -- checkpoints ---------------------------------------------------------------------------------

    def save_state(self, accelerator, folder: Path) -> None:
        """Each device's shards, plus the scheduler and random states (fsdp_checkpoint.py)."""
        save_sharded(self.model, self.optimizer, self.scheduler, folder, is_main(accelerator))

    def load_state(self, accelerator, folder: Path) -> None:
        load_sharded(self.model, self.optimizer, self.scheduler, folder)

    def release(self) -> None:
        self.model = self.optimizer = self.scheduler = None

    def host_state_dict(self, accelerator, scratch: Path) -> dict | None:
        """The whole weights on the main process's host, under the model's own names; None on the other hosts.

        Never gathered on the devices: on several hosts a shard on another host's chip is not addressable.
        Each host writes its own shards into `scratch` (shared storage), and the main process reads them all
        back on its host's CPU (fsdp_checkpoint.py).
        """
        save_weights_sharded(self.model, scratch)
        barrier(accelerator)
        weights = None
        if is_main(accelerator):
            weights = {name.replace("_orig_module.", ""): tensor for name, tensor in read_weights_sharded(scratch).items()}
        barrier(accelerator)  # every host's part was read before the folder goes
        if is_main(accelerator):
            shutil.rmtree(scratch, ignore_errors=True)
        return weights

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
            "hosts": self.host.count,
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
    held, whole = {}, 0
    for tensor in tensors:
        whole += bytes_of(tensor, tensor.numel())
        for device, indices in enumerate(sharding.local_shard_indices(tensor)):
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

