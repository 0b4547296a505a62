"""Checkpoints (after every epoch, and every N steps or M minutes) that survive a kill at any moment.

Each checkpoint is written into a temporary folder and renamed into place only
when complete, its manifest (manifest.py) written last; `LATEST` (replaced atomically) names the newest complete
one. A kill during a save therefore leaves the previous checkpoint as the one to resume; which one a resume may trust
is resume.py's to decide.
"""

import json
import os
import shutil
from pathlib import Path

from ..config.errors import UserError
from ..launch.processes import barrier, gather_objects, is_main, where_am_i
from .manifest import manifest_of, write_manifest

LATEST = "LATEST"
PROGRESS = "progress.json"
SETTINGS = "settings.json"  # the run's options (fault_tolerance/resume.py compares them at a resume)
KEEP = 2


class CheckpointProblem(UserError, RuntimeError):
    """A checkpoint could not be written or read; the message says where and why."""

    # True when every process raises the same problem together, so the command line prints it once.
    every_process = False


class CheckpointNotShared(CheckpointProblem):
    """A checkpoint folder that the main process sees is missing on another host."""

    every_process = True


def checkpoint_root(output_dir) -> Path:
    return Path(output_dir) / "checkpoints"


def latest_checkpoint(output_dir) -> Path | None:
    root = checkpoint_root(output_dir)
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    folder = root / pointer.read_text().strip()
    return folder if (folder / PROGRESS).is_file() else None


def check_seen_everywhere(accelerator, folder: Path, what: str) -> None:
    """Stop every process, with one message, when some host cannot see `folder`.

    Only the main process writes a checkpoint's model files and commits `LATEST`; a host whose
    output_dir is its own local disk would silently start from scratch, or fail alone at a
    save while the others wait for it.
    """
    absent = [place for place in gather_objects(accelerator, None if folder.is_dir() else where_am_i(accelerator)) if place]
    if absent:
        raise CheckpointNotShared(
            f"{what} {folder} is not visible on {', '.join(absent)}: put output_dir on storage that every host "
            "sees (a gcsfuse mount of a bucket, or NFS), the same path on each"
        )


def read_progress(folder: Path) -> dict:
    return json.loads((folder / PROGRESS).read_text())


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def checkpoint_name(progress: dict) -> str:
    """epoch-N after a whole epoch, step-G (the global optimizer step) in the middle of one."""
    return f"step-{progress['global_step']}" if progress["epoch_step"] else f"epoch-{progress['epochs_done']}"


def save_checkpoint(accelerator, output_dir, progress: dict, keep: int, save_state, settings: dict) -> Path:
    """Save the training state, `progress` (where in the run it stands) and `settings`, and make it the one to resume.

    `save_state(accelerator, folder)` is the layout's (parallel/): it writes the model, optimizer and random states.
    `progress` holds epochs_done (whole epochs), epoch_step (batches of the next epoch already trained) and
    global_step; `settings` the run's options (resume.py reads them). The manifest of every file (manifest.py) is
    written last, before the rename; the newest `keep` checkpoints stay.
    """
    root = checkpoint_root(output_dir)
    name = checkpoint_name(progress)
    staging, final = root / f".{name}.partial", root / name
    try:
        if is_main(accelerator):
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        barrier(accelerator)
        # Every process writes its own random states into the folder the main process made.
        check_seen_everywhere(accelerator, staging, "the checkpoint folder")
        save_state(accelerator, staging)
        if is_main(accelerator):
            _write_atomically(staging / PROGRESS, json.dumps(progress))
            _write_atomically(staging / SETTINGS, json.dumps(settings, indent=1))
        barrier(accelerator)  # every process's files are written before they are hashed
        files = manifest_of(accelerator, staging)
        if is_main(accelerator):
            write_manifest(staging, files)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
            _write_atomically(root / LATEST, name)
            _prune(root, newest=name, keep=keep)
    except CheckpointNotShared:
        if is_main(accelerator):
            shutil.rmtree(staging, ignore_errors=True)
        raise
    except (OSError, RuntimeError) as error:
        # torch.save reports a full disk as a RuntimeError from its zip writer ("unexpected pos"),
        # so the free space is measured and named, before the staged files are removed.
        free = _free_bytes(root)
        shutil.rmtree(staging, ignore_errors=True)
        previous = latest_checkpoint(output_dir)
        kept = f"; the previous checkpoint {previous} is intact" if previous else ""
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).strip().splitlines()[0]
        if free is not None and free < 2**20 and not isinstance(error, OSError):
            reason = f"the disk is full ({reason})"
        space = "" if free is None else f" ({free / 2**20:.1f} MiB free there)"
        raise CheckpointProblem(f"cannot write checkpoint {final}: {reason}{space}{kept}") from error
    barrier(accelerator)
    return final


def _free_bytes(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _prune(root: Path, newest: str, keep: int) -> None:
    """Keep the `keep` checkpoints furthest into the run (by global step); remove half-written ones."""

    def reached(path: Path) -> int:
        try:
            return read_progress(path).get("global_step", 0)
        except (OSError, ValueError):
            return -1

    done = sorted((path for path in root.iterdir() if path.is_dir() and (path / PROGRESS).is_file()), key=reached)
    for path in done[:-keep]:
        if path.name != newest:
            shutil.rmtree(path, ignore_errors=True)
    for leftover in root.glob(".*.partial"):
        shutil.rmtree(leftover, ignore_errors=True)


def check_writable(output_dir, report_path=None) -> bool:
    """Fail before training, not after the first epoch, when an output location is unusable. True: output_dir was
    not there (this call made it).

    output_dir holds the checkpoints and the compilation cache; the report may be written elsewhere.
    """
    made = not Path(output_dir).exists()
    places = [("output_dir", Path(output_dir), Path(output_dir))]
    if report_path is not None:
        places.append(("report", Path(report_path), Path(report_path).parent))
    for field, named, folder in places:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # One probe per process: every process checks at once, and a shared name races (one removes
            # the probe another is about to remove).
            probe = folder / f".write-test-{os.getpid()}"
            probe.write_text("ok")
            probe.unlink()
            if named != folder and named.is_dir():
                raise IsADirectoryError(21, "Is a directory")
        except OSError as error:
            # mkdir(exist_ok=True) on a file answers "File exists": say which file is in the way.
            reason = f"{folder} is a file, not a folder" if isinstance(error, FileExistsError) else error.strerror
            raise CheckpointProblem(f"{field}={str(named)!r} is not writable: {reason or error}") from error
    return made
