"""How many XLA graphs this process compiled (and how long it took), and the persistent compilation cache.

All counters are torch_xla's own host-side metrics (read through xla/compilation.py): reading them adds no graph
and no device transfer.
"""

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..launch.hosts import process_label
from ..xla import compilation, runtime


def init_compilation_cache(cache_dir: Path) -> Path | None:
    """Turn on PyTorch/XLA's persistent cache; one folder per host and process so writers never collide.

    Hosts of a pod share output_dir: the folder is named by the host's name and the process's local rank.

    Must run before the first computation of the process. Returns the folder, or
    None where XLA is absent or the cache was already set up in this process.
    """
    if not runtime.installed():
        return None
    folder = Path(cache_dir) / process_label()
    folder.mkdir(parents=True, exist_ok=True)
    return folder if compilation.init_cache(folder) else None


def cache_summary(hits: int, misses: int, read_failures: int) -> str:
    """What the persistent cache did in a run, in words, from torch_xla's counters (the report's compilation_cache).

    Upstream: torch_xla 2.9.0 writes the cache everywhere but reads it back nowhere here. On a TPU loading fails with
    "Deserializing serialized executable not supported" (pytorch/xla issue 9094, open; the fix, pull request 9759, is
    not merged); on the CPU the read fails too (counted as PersistentCacheDeserializeFailure).
    """
    if read_failures:
        return (f"{read_failures} cached graph(s) found but not read back (torch_xla 2.9.0 cannot: pytorch/xla issue "
                f"9094), so compiled again: the cache saved nothing")
    if hits:
        return f"{hits} graph(s) loaded from the cache instead of compiled"
    return f"cold: {misses} graph(s) compiled and written for a later run" if misses else "nothing compiled"


@dataclass
class CompileCounts:
    compilations: int | None
    compile_seconds: float | None
    cache_hits: int | None
    cache_misses: int | None
    cache_read_failures: int | None
    # Reads of device values on the host (each one waits for the device): .item(), .tolist(), printing.
    device_to_host_transfers: int | None


def compile_counts() -> CompileCounts:
    """Process-wide XLA compilation counters (None off XLA)."""
    counters = compilation.counters()
    return CompileCounts(**counters) if counters else CompileCounts(None, None, None, None, None, None)


@contextmanager
def counting_compilations():
    """Yield a dict filled, on exit, with the compilations made inside the block."""
    before = compile_counts()
    result = {}
    try:
        yield result
    finally:
        after = compile_counts()
        for name in CompileCounts.__dataclass_fields__:
            old, new = getattr(before, name), getattr(after, name)
            result[name] = None if new is None else new - (old or 0)
