"""--streaming in either layout: the train stream (data/streaming.py) feeds the devices as it is, and every checkpoint
holds each reader's position in it. A causal LM's only: layout_for gives its layouts these methods.

A stream is one reader's own part already, each process's (data) or each host's for all of its chips (fsdp): no
loader of Accelerate may re-shard or dispatch it. A resumed run goes on at its checkpoint's position (load_state), so
nothing is skipped.
"""

from pathlib import Path

from torch.utils.data import DataLoader

from ..xla.device import uses_xla
from .data import DataParallel
from .data_spmd import DataOverSpmd
from .fsdp import FsdpV2


def is_stream(train_loader) -> bool:
    """--streaming: the task's train loader is data/streaming.py's StreamLoader, a torch DataLoader otherwise."""
    return not isinstance(train_loader, DataLoader)


class Streams:
    """What a layout does differently when its train loader is a stream (with --streaming; otherwise nothing)."""

    stream = None

    def reader(self, accelerator) -> tuple[int, int]:
        """(this reader, readers) of the stream."""
        raise NotImplementedError

    def stream_on_devices(self, accelerator):
        """The stream's batches on this reader's devices."""
        raise NotImplementedError

    def train_batches(self, accelerator, train_loader, epoch: int, skip: int):
        if self.stream is None:
            return super().train_batches(accelerator, train_loader, epoch, skip)
        return self.stream.consumed(self.stream_on_devices(accelerator))

    def save_state(self, accelerator, folder: Path) -> None:
        if self.stream is not None:  # each reader its own position in its stream, as JSON
            self.stream.save(folder, self.reader(accelerator)[0])
        super().save_state(accelerator, folder)

    def load_state(self, accelerator, folder: Path) -> None:
        if self.stream is not None:
            self.stream.restore(folder, self.reader(accelerator)[0])
        super().load_state(accelerator, folder)

    def release(self) -> None:
        self.stream = None
        super().release()


class DataStreams(Streams, DataParallel):
    """Each process reads its own part of the stream."""

    def reader(self, accelerator) -> tuple[int, int]:
        return accelerator.process_index, accelerator.num_processes

    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        if is_stream(train_loader):
            # Accelerate's prepare hands back what is no DataLoader as it is: the stream is never dispatched from the
            # main process. Its batches go to the device in train_batches.
            self.stream = train_loader.read_by(*self.reader(accelerator))
        return super().prepare(accelerator, model, optimizer, train_loader, eval_loader, scheduler)

    def stream_on_devices(self, accelerator):
        """As Accelerate moves a prepared loader's batches: its XLA device loader (prefetching)."""
        if uses_xla(accelerator.device):
            from accelerate.data_loader import MpDeviceLoaderWrapper

            return MpDeviceLoaderWrapper(self.stream, accelerator.device)
        from accelerate.utils import send_to_device

        return (send_to_device(batch, accelerator.device) for batch in self.stream)


class FsdpStreams(Streams, FsdpV2):
    """Each host reads its own part of the stream for all of its chips."""

    def reader(self, accelerator) -> tuple[int, int]:
        return self.host.index, self.host.count

    def prepare(self, accelerator, model, optimizer, train_loader, eval_loader, scheduler):
        if not is_stream(train_loader):
            return super().prepare(accelerator, model, optimizer, train_loader, eval_loader, scheduler)
        self.stream = train_loader.read_by(*self.reader(accelerator))  # not a host-side loader of Accelerate's
        self.optimizer, self.scheduler = optimizer, scheduler
        return model, optimizer, self.stream, self._host_side(eval_loader), scheduler

    def stream_on_devices(self, accelerator):
        return self._on_devices(self.stream, self.stream.sample())  # its shape without reading the stream


class DataOverSpmdStreams(FsdpStreams, DataOverSpmd):
    """The data layout of one process per host (data_spmd.py): each host reads its part for all of its chips, as fsdp."""


def streaming(layout):
    """The layout class `layout` (DataParallel, DataOverSpmd or FsdpV2), able to train on a stream."""
    return {DataParallel: DataStreams, DataOverSpmd: DataOverSpmdStreams, FsdpV2: FsdpStreams}[layout]
