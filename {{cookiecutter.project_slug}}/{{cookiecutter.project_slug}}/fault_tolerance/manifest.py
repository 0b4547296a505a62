"""A checkpoint's manifest: every file it holds, with its size and sha256, written last, checked before a resume.

A checkpoint can be damaged after it was written (a copy cut short, a full bucket, bit rot); read as it is, a damaged
file ends in a torch traceback, or (Accelerate's random states) in a run that silently draws other random numbers.
The manifest names what the save wrote, so that a resume can say which file differs and take an older checkpoint.

sha256, not a cheaper checksum: 0.6 s a GB on this project's 2-core test machine against crc32's 0.3 (the
checkpoint benchmark measures it), and the work is split between the processes, a file each in turn, at a save and
at a resume only, never in a step. It guards against damage, not against someone who writes the manifest too: what
a resume unpickles is refused beyond tensors and plain data on its own (safe_loading.py).
"""

import hashlib
import json
from pathlib import Path

from ..launch.processes import gather_objects, position

MANIFEST = "manifest.json"
CHUNK = 16 * 2**20  # bytes read at a time: a file of any size is hashed in constant memory


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file() and path.name != MANIFEST)


def _share(accelerator, names: list[str]) -> list[str]:
    # Every process takes every n-th file of the same sorted list: the hashing is split, each file hashed once.
    index, count = position(accelerator)
    return names[index::count]


def manifest_of(accelerator, folder: Path) -> dict:
    """{file: {"bytes", "sha256"}} of every file in `folder`, hashed by all processes together (call on every process)."""
    mine = {name: {"bytes": (folder / name).stat().st_size, "sha256": sha256(folder / name)}
            for name in _share(accelerator, _files(folder))}
    return {name: entry for part in gather_objects(accelerator, mine) for name, entry in part.items()}


def write_manifest(folder: Path, files: dict) -> None:
    """The main process writes it, last: a folder without one was not completely written (or not by this project)."""
    own = {"format": 1, "hash": "sha256", "files": files, "files_sha256": _digest_of(files)}
    (folder / MANIFEST).write_text(json.dumps(own, indent=1))


def _digest_of(files: dict) -> str:
    # The manifest's own checksum: a damaged manifest is named as such, not as a mismatch of the file it misdescribes.
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def damage(accelerator, folder: Path) -> str | None:
    """What is wrong with the checkpoint `folder`, the same answer on every process; None when every file matches.

    Each process checks its share of the files; the first problem in file order is the answer.
    """
    try:
        written = json.loads((folder / MANIFEST).read_text())
        files = written["files"]
        if written.get("files_sha256") != _digest_of(files):
            raise ValueError("it does not match its own checksum")
    except FileNotFoundError:
        files, problem = {}, f"it has no {MANIFEST} (the save did not finish, or an older version wrote it)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        files, problem = {}, f"its {MANIFEST} cannot be read ({error})"
    else:
        problem = None
    found = []
    for name in _share(accelerator, sorted(files)):
        found.append(_check(folder, name, files[name]))
    problems = [item for part in gather_objects(accelerator, [problem, *found]) for item in part if item]
    return problems[0] if problems else None


def _check(folder: Path, name: str, entry: dict) -> str | None:
    path = folder / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{name} is missing"
    except OSError as error:
        return f"{name} cannot be read ({error.strerror})"
    if size != entry["bytes"]:
        return f"{name} has {size} bytes, the manifest says {entry['bytes']}"
    if sha256(path) != entry["sha256"]:
        return f"{name} differs from what was written (sha256 mismatch)"
    return None
