"""Is torch_xla there and started, which host this process is, its random seed, and gathering host objects."""

import importlib.util
import sys


def installed() -> bool:
    """Found on the path, without importing it (a mismatched torch would make the import itself fail)."""
    return importlib.util.find_spec("torch_xla") is not None


def imported() -> bool:
    """Already imported in this process: reading its counters then adds nothing, and imports nothing."""
    return "torch_xla" in sys.modules


def import_problem() -> str | None:
    """Why `import torch_xla` fails (its first line), or None when it imports."""
    try:
        import torch_xla  # noqa: F401
    except ImportError as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def started() -> bool:
    """The runtime of this process is running (a device was touched); importing torch_xla here changes nothing."""
    module = sys.modules.get("torch_xla")
    return module is not None and module._XLAC._xla_runtime_is_initialized()


def process_index_and_count() -> tuple[int, int]:
    """torch_xla's process index and count (one process per host under SPMD). Starts the runtime."""
    import torch_xla.runtime as xr

    return xr.process_index(), xr.process_count()


def rng_state() -> int:
    """torch_xla's random seed: every graph sync advances it, so a save that syncs must put it back."""
    import torch_xla.core.xla_model as xm

    return xm.get_rng_state()


def set_rng_state(seed: int) -> None:
    import torch_xla.core.xla_model as xm

    xm.set_rng_state(seed)


def gather_objects(value) -> list:
    """Every process's `value`, in process order: torch_xla's all-gather of host objects.

    It runs XLA collectives (graphs), hence never per step. accelerate.utils.gather_object raises
    NotImplementedError on XLA (Accelerate 1.15), which is why this exists.
    """
    import torch_xla.core.xla_model as xm

    return xm.mesh_reduce("gather_objects", value, list)
