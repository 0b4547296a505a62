"""How many XLA graphs this process compiled (and how long it took), and the persistent compilation cache.

All counters are torch_xla's own host-side metrics: reading them adds no graph and no device transfer.
"""

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .environment import xla_installed
from .hosts import process_label


def init_compilation_cache(cache_dir: Path) -> Path | None:
    """Turn on PyTorch/XLA's persistent cache; one folder per host and process so writers never collide.

    Hosts of a pod share output_dir: the folder is named by the host's name and the process's local rank.

    Must run before the first computation of the process. Returns the folder, or
    None where XLA is absent or the cache was already set up in this process.
    """
    if not xla_installed():
        return None
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return None
    folder = Path(cache_dir) / process_label()
    folder.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(folder), readonly=False)
    return folder


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
    if not xla_installed() or "torch_xla" not in sys.modules:
        return CompileCounts(None, None, None, None, None, None)
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    transfers = met.metric_data("TransferFromDeviceTime")
    return CompileCounts(
        compilations=compilations_so_far(),
        compile_seconds=data[1] / 1e9 if data else 0.0,
        cache_hits=met.counter_value("PersistentCacheHit") or 0,
        cache_misses=met.counter_value("PersistentCacheMiss") or 0,
        cache_read_failures=met.counter_value("PersistentCacheDeserializeFailure") or 0,
        device_to_host_transfers=transfers[0] if transfers else 0,
    )


def compilations_so_far() -> int | None:
    """This process's compilation count: one host-side counter, cheap enough to read after every step."""
    if not xla_installed() or "torch_xla" not in sys.modules:
        return None
    import torch_xla.debug.metrics as met

    return met.counter_value("UncachedCompile") or 0


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
