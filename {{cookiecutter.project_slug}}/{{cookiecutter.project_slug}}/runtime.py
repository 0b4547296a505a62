"""Where the code runs: XLA or not, which device, how many graphs it compiled.

Nothing here touches an XLA device at import time: the notebook imports this
module in the parent process, which must stay device-free until launch.
"""

import glob
import importlib.metadata
import importlib.util
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


class EnvironmentProblem(RuntimeError):
    """The installed stack cannot run as asked; the message says how to fix it."""


def xla_installed() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def installed_release(distribution: str) -> str | None:
    """The installed release (2.9.0, without +cu128), read from package metadata without importing it."""
    try:
        return importlib.metadata.version(distribution).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def tpu_device_files() -> list[str]:
    """TPU chips as the kernel shows them: /dev/accel* (v2-v4) or /dev/vfio/<n> (v5e and later)."""
    vfio = [path for path in glob.glob("/dev/vfio/*") if os.path.basename(path).isdigit()]
    return sorted(glob.glob("/dev/accel*") + vfio)


def libtpu_installed() -> bool:
    return importlib.util.find_spec("libtpu") is not None or bool(os.environ.get("TPU_LIBRARY_PATH"))


def check_stack() -> None:
    """Turn the common set-up mistakes into one readable line each, before anything deep fails."""
    wants_tpu = os.environ.get("PJRT_DEVICE", "").upper() == "TPU"
    if not xla_installed():
        if wants_tpu:
            raise EnvironmentProblem(
                "PJRT_DEVICE=TPU but torch_xla is not installed: run `pip install -e '.[tpu]'` on the TPU host"
            )
        return
    # Versions from metadata: with a mismatched pair, importing torch_xla itself dies on an undefined symbol.
    torch_release, xla_release = installed_release("torch"), installed_release("torch_xla")
    fix = f"install the pair together, e.g. `pip install torch=={xla_release} 'torch_xla[tpu]=={xla_release}'`"
    if torch_release and xla_release and torch_release.split(".")[:2] != xla_release.split(".")[:2]:
        raise EnvironmentProblem(f"torch {torch_release} does not match torch_xla {xla_release}: {fix}")
    try:
        import torch_xla  # noqa: F401
    except ImportError as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise EnvironmentProblem(
            f"torch_xla {xla_release} cannot be imported with torch {torch_release} ({reason}): {fix}"
        ) from None
    if wants_tpu and not libtpu_installed():
        if tpu_device_files():
            raise EnvironmentProblem(
                "PJRT_DEVICE=TPU but libtpu is not installed (the [tpu] extra is missing): "
                "run `pip install -e '.[tpu]'`"
            )
        raise EnvironmentProblem(
            "PJRT_DEVICE=TPU but this machine has no TPU (no /dev/accel* or /dev/vfio device, no libtpu): "
            "unset PJRT_DEVICE, or set PJRT_DEVICE=CPU for an XLA device on the CPU "
            "(on a TPU VM, `pip install -e '.[tpu]'`)"
        )


def uses_xla(device) -> bool:
    return getattr(device, "type", str(device)) == "xla"


def sync(device, wait: bool = False) -> None:
    """Cut the lazy graph here so that every step runs the same compiled program."""
    if uses_xla(device):
        import torch_xla

        torch_xla.sync(wait=wait)


def device_kind(device) -> str:
    """'TPU', 'CPU', 'CUDA'... for an XLA device; the torch device type otherwise."""
    if uses_xla(device):
        import torch_xla.runtime as xr

        return f"xla:{xr.device_type()}"
    return str(getattr(device, "type", device))


def init_compilation_cache(cache_dir: Path) -> Path | None:
    """Turn on PyTorch/XLA's persistent cache; one folder per process so writers never collide.

    Must run before the first computation of the process. Returns the folder, or
    None where XLA is absent or the cache was already set up in this process.
    """
    if not xla_installed():
        return None
    import torch_xla
    import torch_xla.runtime as xr

    if torch_xla._XLAC._xla_computation_cache_is_initialized():
        return None
    folder = Path(cache_dir) / f"process-{local_rank()}"
    folder.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(folder), readonly=False)
    return folder


def local_rank() -> str:
    """This process's index on its host, before any Accelerator exists (0 for a lone process)."""
    return os.environ.get("PJRT_LOCAL_PROCESS_RANK") or os.environ.get("LOCAL_RANK") or "0"


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


def device_zeros(size: int, dtype, device):
    """A zero accumulator that reaches the device as data, not as a graph constant."""
    return device_values([0] * size, dtype, device)


def device_values(values: list, dtype, device):
    """An accumulator with these starting values that reaches the device as data, not as a graph constant.

    A 0-d tensor would be folded into the next graph as a constant, making the first
    step's graph differ from every later one (one extra compilation).
    """
    import torch

    tensor = torch.tensor(values, dtype=dtype).to(device)
    if uses_xla(device):
        import torch_xla.runtime as xr

        if xr.is_spmd():
            import torch_xla.distributed.spmd as xs

            # Under SPMD a graph's outputs carry a sharding (a sum is replicated) and the sharding is part of
            # the graph: an accumulator fresh from the host must carry the same, or the step that first sees
            # a fresh one after a sharded one (the next epoch, the second eval batch) compiles again.
            xs.mark_sharding(tensor, xs.get_global_mesh(), (None,) * tensor.dim())
    return tensor


def barrier(accelerator) -> None:
    """wait_for_everyone, skipped for one process: on XLA it compiles a rendezvous graph."""
    if accelerator.num_processes > 1:
        accelerator.wait_for_everyone()


@contextmanager
def main_process_first(accelerator):
    if accelerator.num_processes > 1:
        with accelerator.main_process_first():
            yield
    else:
        yield


def gather_objects(accelerator, value) -> list:
    """Every process's `value` (a small picklable host object), in process order, on every process.

    For decisions and checks made once per run, never inside the step loop.
    """
    if accelerator.num_processes == 1:
        return [value]
    if accelerator.distributed_type.value == "XLA":
        # accelerate.utils.gather_object raises NotImplementedError on XLA (Accelerate 1.15). torch_xla's
        # mesh_reduce is its all-gather of host objects; it runs XLA collectives (graphs), hence not per step.
        import torch_xla.core.xla_model as xm

        return xm.mesh_reduce("gather_objects", value, list)
    from accelerate.utils import gather_object

    return gather_object([value])


def main_process_decides(accelerator, decide):
    """Run `decide()` on the main process only and hand its answer to every process.

    Whatever depends on the outside world (is the hub reachable, which checkpoint is the newest)
    is decided once: probed in every process, the answers can differ and the processes would
    train different models or resume from different epochs.
    """
    answer = [decide() if accelerator.is_main_process else None]
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(answer, from_process=0)
    return answer[0]


def is_main_process() -> bool:
    """The main process of the run, also where no Accelerator exists (yet, or any more)."""
    if "accelerate" in sys.modules:
        from accelerate.state import PartialState

        if PartialState._shared_state:
            return PartialState().is_main_process
    return os.environ.get("RANK", "0") == "0"


def where_am_i(accelerator) -> str:
    """'host NAME (process I)', as messages that name a process say it."""
    import socket

    return f"host {socket.gethostname()} (process {accelerator.process_index})"


def quiet_unless_main(accelerator) -> None:
    """Progress bars and library warnings once per run: only the main process shows them."""
    if accelerator.is_main_process:
        return
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()


def sum_over_processes(accelerator, tensor):
    """Sum across processes; a no-op (and no extra graph) for one process."""
    if accelerator.num_processes == 1:
        return tensor
    return accelerator.reduce(tensor, reduction="sum")
