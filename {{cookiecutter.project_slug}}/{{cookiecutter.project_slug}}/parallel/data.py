"""The data-parallel layout: one process per chip, each holding a full replica; Accelerate does the rest.

Accelerate prepares the model, optimizer, scheduler and loaders (each process gets its own share of every
batch round), averages gradients between processes, and writes checkpoints with `save_state`.
"""

import pickle
from pathlib import Path

import torch

from ..config.groups import ModelOptions, ParallelismOptions
from ..fault_tolerance.safe_loading import load_accelerate_file, refused_among
from ..models.lora import trainable_state
from ..models.modeling import enable_gradient_checkpointing
from ..xla import runtime
from ..xla.device import uses_xla
from .layout import Layout


class DataParallel(Layout):
    name = "data"
    files = "accelerate: one process per chip"

    def __init__(self, parallel: ParallelismOptions, model: ModelOptions):
        self.options, self.model_options = parallel, model
        self.model = None

    def start(self) -> None:
        """Nothing to set before the runtime starts: Accelerate's launchers start one process per chip."""

    def wrap(self, model):
        """Unchanged: Accelerate's `prepare` moves the model to the device."""
        if self.model_options.gradient_checkpointing:
            enable_gradient_checkpointing(model)
        return model

    def devices_per_process(self) -> int:
        """A loader batch is one device's batch."""
        return 1

    def replicas(self, accelerator) -> int:
        """Per-device batches in one optimizer step."""
        return accelerator.num_processes

    def loader_shards(self, accelerator) -> int:
        """Processes that each load their own part of an evaluation round."""
        return accelerator.num_processes

    def scheduler_calls_per_step(self, accelerator) -> int:
        # Accelerate's prepared scheduler steps the one it wraps num_processes times per optimizer step
        # (split_batches=False), so the schedule is sized in per-process batches.
        return accelerator.num_processes

    def clip_gradients(self, accelerator, model, max_norm: float):
        """Clip the global norm of the gradients every process holds once they are reduced; returns the norm before.

        Accelerate's clip_grad_norm_ reduces them first on XLA (the reduce the optimizer step would make), and DDP
        has reduced them in the backward pass on the other devices.
        """
        return accelerator.clip_grad_norm_(model.parameters(), max_norm)

    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        prepared = accelerator.prepare(model, optimizer, train_loader, eval_loader, scheduler)
        for loader, original in zip(prepared[2:4], (train_loader, eval_loader), strict=True):
            if not hasattr(loader, "dataset") and hasattr(original, "dataset"):
                # Accelerate's XLA loader wrapper lacks `.dataset`, which its own save_state reads.
                loader.dataset = original.dataset
        self.model = prepared[0]
        if self.model_options.lora_r is not None:
            accelerator.register_save_state_pre_hook(_trained_weights_only)
        return prepared

    def prepare_prediction(self, accelerator, model, loader):
        """predict.py: the model on this process's device, this process's share of the batches."""
        self.model, loader = accelerator.prepare(self.wrap(model), loader)
        return self.model, loader

    def train_batches(self, accelerator, train_loader, epoch: int, skip: int):
        # Through Accelerate's loader, not the sampler: on every pass it re-applies its own epoch counter
        # to the sampler, and that counter restarts at 0 in a resumed run.
        train_loader.set_epoch(epoch)
        # Accelerate's own skipping: the same order as the uninterrupted epoch, its first batches left out.
        return accelerator.skip_first_batches(train_loader, skip) if skip else train_loader

    def eval_batches(self, eval_loader):
        return eval_loader

    def save_state(self, accelerator, folder: Path) -> None:
        """Accelerate's save_state, leaving torch_xla's random state as it was before the save.

        Accelerate 1.15 writes tensors with xm.save, whose rendezvous syncs the graph, and every sync
        advances torch_xla's random seed; it then records the seed reached after those syncs. A run with
        a checkpoint would draw other dropout masks than one without, and a run resumed from a step
        checkpoint other ones than the uninterrupted run. So the seed from before the save is put back,
        and is the one recorded.
        """
        # Pickled weights, not safetensors: safetensors' loader reads storage pointers, which
        # XLA tensors do not have, so `load_state` of a model.safetensors fails on XLA.
        if not uses_xla(accelerator.device):
            accelerator.save_state(str(folder), safe_serialization=False)
            return
        seed = runtime.rng_state()
        accelerator.save_state(str(folder), safe_serialization=False)
        runtime.set_rng_state(seed)
        states_file = _random_states(folder, accelerator)
        states = load_accelerate_file(states_file)
        states["xm_seed"] = seed
        torch.save(states, states_file)

    def load_state(self, accelerator, folder: Path) -> None:
        states_file = _random_states(folder, accelerator)
        if states_file.is_file():
            # Accelerate reads it weights-only too, but takes any failure there for a missing file (it logs "Could
            # not load random states" at info level and goes on): a refused one must stop the run.
            load_accelerate_file(states_file, map_location="cpu")
        # A LoRA checkpoint holds the trained weights only; the frozen base is already in place (built as before).
        strict = {} if self.model_options.lora_r is None else {"strict": False}
        try:
            accelerator.load_state(str(folder), **strict)
        except pickle.UnpicklingError:  # torch's weights-only refusal, which names no file
            problem = refused_among(folder)
            if problem is None:
                raise
            raise problem from None

    def release(self) -> None:
        self.model = None

    def host_state_dict(self, accelerator, scratch: Path) -> dict:
        """The weights as plain CPU tensors under the model's own names (every process holds them all: no `scratch`)."""
        model = accelerator.unwrap_model(self.model)
        return {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}

    def plain_model(self, accelerator):
        return accelerator.unwrap_model(self.model)

    def describe(self, accelerator, optimizer, bytes_of) -> dict:
        """Every device holds the whole model and its optimizer state; `bytes_of(tensor, elements)` sizes them."""
        parameters = sum(bytes_of(p, p.numel()) for p in self.model.parameters())
        state = sum(bytes_of(t, t.numel()) for s in optimizer.state.values() for t in s.values()
                    if torch.is_tensor(t) and t.dim() > 0)
        return {
            "parallelism": self.name,
            "devices": accelerator.num_processes,
            "mesh": None,
            "parameter_bytes_per_device": parameters,
            "parameter_bytes": parameters,
            "parameter_bytes_by_device": [parameters] * accelerator.num_processes,
            "optimizer_bytes_per_device": state,
            "optimizer_bytes": state,
            "optimizer_bytes_by_device": [state] * accelerator.num_processes,
            "bytes_from": "elements of the replica (every device holds all of it)",
        }


def _random_states(folder: Path, accelerator) -> Path:
    """This process's random states as Accelerate's save_state names them."""
    return folder / f"random_states_{accelerator.process_index}.pkl"


def _trained_weights_only(models, weights, output_dir) -> None:
    """Accelerate's save-state hook under LoRA: each model's saved weights cut down to its trainable ones (models/lora.py).

    `weights[i]` is models[i]'s state dict under the prepared (possibly DDP-wrapped) model's names.
    """
    for index, model in enumerate(models):
        weights[index] = trainable_state(model, weights[index])
