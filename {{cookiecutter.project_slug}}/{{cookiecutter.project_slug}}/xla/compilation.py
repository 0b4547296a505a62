"""torch_xla's compilation counters, its persistent compilation cache, and its analysis of each compilation.

All counters are host-side metrics: reading them adds no graph and no device transfer.
"""

import os
from pathlib import Path

from .runtime import imported, installed, started


def init_cache(folder: Path) -> bool:
    """Turn on the persistent cache in `folder`; False when it is already on in this process (or XLA is absent)."""
    if not installed():
        return False
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return False
    xr.initialize_cache(str(folder), readonly=False)
    return True


def scalars_as_data() -> None:
    """Send every Python scalar an operation takes to the device as fresh data, whatever its value.

    Two torch_xla habits make a graph depend on a scalar's value: 0, 1 and -1 are baked in as constants (its
    "special scalars"), and scalars of equal value share one cached device buffer, so a graph whose two scalars
    happen to be equal has one parameter fewer. A learning rate that warms up from 0, or one so small that
    AdamW's `1 - lr * weight_decay` is 1.0 in float32 (below 2.98e-6 at a weight decay of 0.01), was then another
    graph. Both habits are run-time switches (the XLA_NO_SPECIAL_SCALARS variable is read only when torch_xla is
    imported); set before the process's first graph. The cost: every scalar is a transfer, each step (about 330 a
    step with torch's AdamW on the demo's model), so only runs whose optimizer takes its moving numbers as Python
    scalars turn it on (loop/optimizers.py). It stays on for the rest of the process.
    """
    import torch_xla

    torch_xla._XLAC._set_xla_handle_special_scalars(False)
    torch_xla._XLAC._set_xla_enable_device_data_cache(False)


def counters() -> dict | None:
    """Compilations, their seconds, cache hits, misses and read failures, device-to-host transfers; None off XLA."""
    if not installed() or not imported():
        return None
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    transfers = met.metric_data("TransferFromDeviceTime")
    return {
        "compilations": compilations_so_far(),
        "compile_seconds": data[1] / 1e9 if data else 0.0,
        "cache_hits": met.counter_value("PersistentCacheHit") or 0,
        "cache_misses": met.counter_value("PersistentCacheMiss") or 0,
        "cache_read_failures": met.counter_value("PersistentCacheDeserializeFailure") or 0,
        "device_to_host_transfers": transfers[0] if transfers else 0,
    }


def compilations_so_far() -> int | None:
    """This process's compilation count: one host-side counter, cheap enough to read after every step."""
    if not installed() or not imported():
        return None
    import torch_xla.debug.metrics as met

    return met.counter_value("UncachedCompile") or 0


def last_compile_seconds(new: int) -> list[float] | None:
    """Seconds of each of the last `new` compilations, from the CompileTime samples (None when fewer are kept)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    samples = data[2] if data else ()
    if len(samples) < new:
        return None
    return [value / 1e9 for _, value in samples[-new:]]


def enable_analysis(path: Path) -> bool:
    """Ask torch_xla to explain each compilation (cause, Python frame) in `path`: before the runtime starts.

    False where the user set PT_XLA_DEBUG_LEVEL already (their setting wins) or this process's runtime already
    runs (a second run in one notebook process): torch_xla reads the variables once, when it starts.
    """
    if "PT_XLA_DEBUG_LEVEL" in os.environ or started():
        return False
    os.environ.update(PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(path))
    return True
