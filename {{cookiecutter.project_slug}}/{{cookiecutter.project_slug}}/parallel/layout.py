"""`Layout`: the methods the loop calls on a layout, and what it expects of each; data.py and fsdp.py implement them.

A layout decides where the model, its optimizer state and each batch live, and how a checkpoint is written. The loop
(loop/preparation.py, training.py, export.py, report.py, prediction.py) and the checkpoints
(fault_tolerance/checkpoint_schedule.py) call these methods whichever layout they hold. A new layout derives from
`Layout`, implements every method with these arguments (tests/test_layout_contract.py checks both layouts do), and is
named in layout_for (parallel/__init__.py). A run calls them in this order: `start`; `wrap`; the sizes
(`devices_per_process`, `replicas`, `loader_shards`, `scheduler_calls_per_step`); `prepare`; every epoch
`train_batches` and `eval_batches`, `clip_gradients` in each step's graph, `save_state` or `load_state` at a
checkpoint; at the end `host_state_dict`, `plain_model`, `describe` and `release`. predict.py calls `start` and
`prepare_prediction`.
"""

from abc import ABC, abstractmethod
from pathlib import Path


class Layout(ABC):
    """Where a run's model, optimizer state and batches live; made from the run's ParallelismOptions and
    ModelOptions (config/groups.py: `Layout(config.parallel, config.model)`)."""

    name: str  # the --parallelism value that chooses it (config/defaults.py's PARALLELISMS)
    files: str  # how its checkpoints are written; a resume refuses another (fault_tolerance/resume.py's REFUSED)

    # -- before the first tensor reaches a device --------------------------------------------------

    @abstractmethod
    def start(self) -> None:
        """Set up what the runtime needs before the first tensor reaches a device (SPMD, the mesh, the hosts' group).

        Called once, before the Accelerator is made.
        """

    # -- sizes the loop plans the run with ------------------------------------------------------------

    @abstractmethod
    def devices_per_process(self) -> int:
        """The devices one loader batch feeds: the per-device batch times this is what one process loads at a time."""

    @abstractmethod
    def replicas(self, accelerator) -> int:
        """Per-device batches in one optimizer step over the whole run: the global batch is this times the per-device one."""

    @abstractmethod
    def loader_shards(self, accelerator) -> int:
        """The loaders that each load their own part of a round of batches (one per process, or one per host)."""

    @abstractmethod
    def scheduler_calls_per_step(self, accelerator) -> int:
        """How often the learning-rate scheduler is stepped per optimizer step, so that the schedule is sized in them."""

    # -- the model, the optimizer and the loaders -----------------------------------------------------

    @abstractmethod
    def wrap(self, model):
        """The model as this layout trains it (gradient checkpointing enabled if asked), before the optimizer is made."""

    @abstractmethod
    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        """(model, optimizer, train_loader, eval_loader, scheduler), each placed as this layout trains them.

        The loop uses what it returns in their stead; the layout keeps what its checkpoints need.
        """

    @abstractmethod
    def clip_gradients(self, accelerator, model, max_norm: float):
        """Clip the gradients' global norm over every device to `max_norm`; returns the norm before, on the device.

        Called in every step's graph: no host read.
        """

    @abstractmethod
    def train_batches(self, accelerator, train_loader, epoch: int, skip: int):
        """The epoch's training batches on the devices, in the order of the uninterrupted epoch `epoch`, the first
        `skip` left out (a run resumed from a step checkpoint)."""

    @abstractmethod
    def eval_batches(self, eval_loader):
        """The evaluation's batches on the devices."""

    @abstractmethod
    def prepare_prediction(self, accelerator, model, loader):
        """predict.py: (model, loader) placed as in training, each process or host its own share of the batches."""

    # -- checkpoints -----------------------------------------------------------------------------------

    @abstractmethod
    def save_state(self, accelerator, folder: Path) -> None:
        """Write what a resume needs (weights, optimizer, scheduler, random states) into `folder`; every process calls
        it. The folder is staged and made final by fault_tolerance/checkpointing.py."""

    @abstractmethod
    def load_state(self, accelerator, folder: Path) -> None:
        """Read back what save_state wrote into the prepared model, optimizer and scheduler; every process calls it."""

    # -- the end of the run ----------------------------------------------------------------------------

    @abstractmethod
    def host_state_dict(self, accelerator, scratch: Path) -> dict | None:
        """The whole weights as CPU tensors under the model's own names: on the main process, and None on a process
        that does not hold them; `scratch` (on storage every host sees) for a layout that gathers them through files."""

    @abstractmethod
    def plain_model(self, accelerator):
        """The model the user built, without the layout's wrappers (its config, its modules by their own names)."""

    @abstractmethod
    def describe(self, accelerator, optimizer, bytes_of) -> dict:
        """The report's `layout`: parallelism, devices, mesh, and the parameter and optimizer bytes each device holds
        (`bytes_of(tensor, elements)` sizes elements of a tensor as the run stores them)."""

    @abstractmethod
    def release(self) -> None:
        """Let go of the trained model, optimizer and loaders at the run's end, while the processes' group still exists
        (loop/training.py says why); a notebook's next run can then free them."""
