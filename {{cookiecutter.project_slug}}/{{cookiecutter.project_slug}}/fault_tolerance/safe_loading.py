"""Reading back what a run wrote (checkpoints, its own state files) without running anything a file holds.

A pickle can name any function and have it called while it loads: a checkpoint copied from elsewhere (or rewritten,
manifest and all) could run code at `--resume`. So every pickled file a run reads back is unpickled as tensors and
plain data only, and a file holding more is refused in one line that names it (exit status 2, see cli.py):

  torch's weights-only unpickler       fsdp's host_state.pt and the pickled entries of its shards; Accelerate's model,
                                       optimizer, scheduler and random states (with Accelerate's allow-list for numpy)
  DCP_METADATA_CLASSES (below)         torch.distributed.checkpoint's `.metadata`, which torch unpickles unrestricted
"""

import pickle
import re
from pathlib import Path

from .checkpointing import CheckpointProblem

# What torch.distributed.checkpoint's metadata of a save of this project pickles (listed from a real one with
# pickletools): its dataclasses and their enum, the storage entries of FileSystemWriter, torch.Size, the layout
# (pickled as a call of _get_layout with its name: a lookup among torch's layouts) and the path the save was made to.
# torch's dtypes are added by name below; the built-in containers (dict, list, tuple) need no global at all.
DCP_METADATA_CLASSES = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING",
    )
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "bytearray"), ("builtins", "complex"),
}


class UnsafeCheckpoint(CheckpointProblem):
    """A file read back holds more than tensors and plain data: refused before anything in it ran."""


def refused(path, detail: str = "") -> UnsafeCheckpoint:
    found = f" ({detail})" if detail else ""
    return UnsafeCheckpoint(f"{path} holds more than tensors and plain data{found}: refused, nothing in it was run")


def _what(error: Exception) -> str:
    """The global that torch's weights-only unpickler refused, from its (many-line) message, or ''."""
    named = re.search(r"GLOBAL ([\w.]+)", str(error))
    return f"it names {named.group(1)}" if named else ""


def load_plain(path: Path, **kwargs):
    """torch.load of tensors and plain data only (no allow-list); a file holding more is refused by name."""
    import torch

    try:
        return torch.load(path, weights_only=True, **kwargs)
    except pickle.UnpicklingError as error:  # torch's message does not name the file
        raise refused(path, _what(error)) from None


def load_accelerate_file(path: Path, map_location=None):
    """A file of Accelerate's `save_state`, read as its `load_state` reads it: weights-only, with Accelerate's
    allow-list for numpy's random state; a file holding more is refused by name."""
    from accelerate.utils.other import load

    try:
        return load(path, map_location=map_location)
    except pickle.UnpicklingError as error:
        raise refused(path, _what(error)) from None


def refused_among(folder: Path) -> UnsafeCheckpoint | None:
    """Which of an Accelerate checkpoint's pickled files is refused (each read weights-only), or None.

    Only after `load_state` failed: Accelerate's own error names no file, and a resume that works pays nothing.
    """
    for path in sorted(folder.iterdir()):
        if path.suffix in (".bin", ".pkl") and path.is_file():
            try:
                load_accelerate_file(path, map_location="cpu")
            except UnsafeCheckpoint as problem:
                return problem
    return None


def refused_in_shards(folder: Path, error: BaseException) -> UnsafeCheckpoint | None:
    """torch.distributed.checkpoint's CheckpointException (a BaseException) over every rank's failure, when one was
    torch's weights-only refusal of a pickled entry of the shards: refused, naming the folder (the entry's file is in
    the failure's traceback only). None for any other failure."""
    for failure, _ in getattr(error, "failures", {}).values():
        if isinstance(failure, pickle.UnpicklingError):
            return refused(folder, _what(failure))
    return None


class _Refused(pickle.UnpicklingError):
    """A global outside DCP_METADATA_CLASSES (a pickle that is only broken raises a plain UnpicklingError)."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        import torch

        # vars(), not getattr: torch's module __getattr__ imports submodules by name.
        dtype = module == "torch" and isinstance(vars(torch).get(name), torch.dtype)
        if dtype or (module, name) in DCP_METADATA_CLASSES:
            return super().find_class(module, name)
        raise _Refused(f"it names {name if module == 'builtins' else f'{module}.{name}'}")  # as torch names it


def check_dcp_metadata(folder: Path) -> None:
    """Refuse a torch.distributed.checkpoint folder whose `.metadata` holds more than its metadata's classes.

    torch 2.9's FileSystemReader.read_metadata (torch/distributed/checkpoint/filesystem.py) reads it with a bare
    `pickle.load`, which calls whatever the file names; this reads it first with only DCP_METADATA_CLASSES allowed.
    (The shards themselves are read weights-only by torch: tensors with torch.load(weights_only=True), the
    non-tensor entries by torch_xla's planner with torch.load's default, weights-only since torch 2.6, whose refusal
    refused_in_shards names.)
    """
    from torch.distributed.checkpoint.metadata import Metadata

    path = Path(folder) / ".metadata"
    try:
        with path.open("rb") as handle:
            metadata = _MetadataUnpickler(handle).load()
    except _Refused as error:
        raise refused(path, str(error)) from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise CheckpointProblem(f"cannot read {path}: {error}".splitlines()[0]) from None
    if not isinstance(metadata, Metadata):
        raise refused(path, f"a {type(metadata).__name__}, not torch.distributed.checkpoint's Metadata")
