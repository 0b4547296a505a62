"""Is torch_xla there and started, which host this process is, its random seed, and gathering host objects."""

import importlib.util
import os
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


def one_process_sees_several_chips() -> bool:
    """Before the runtime starts, from the launcher's environment: this process is its host's only one (no
    torch_xla spawn, accelerate or torchrun worker count above 1) and the PJRT device has several chips here (a TPU
    host's, with PJRT_DEVICE=TPU or unset, as torch_xla then picks the TPU; CPU_NUM_DEVICES on the CPU). False
    without torch_xla."""
    if not installed():
        return False
    workers = max(int(os.environ.get(name) or 1) for name in ("PJRT_LOCAL_PROCESS_COUNT", "LOCAL_WORLD_SIZE", "WORLD_SIZE"))
    device = os.environ.get("PJRT_DEVICE", "").upper()
    if device == "CPU":
        chips = int(os.environ.get("CPU_NUM_DEVICES") or 1)
    elif device in ("TPU", ""):
        from torch_xla._internal import tpu

        chips = tpu.num_available_chips()  # read from the PCI bus: no runtime, no metadata server
    else:
        chips = 1
    return workers == 1 and chips > 1


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


def keep_torchax_out() -> None:
    """Keep torchax, the JAX bridge in torch_xla's wheel, out of a run of the lazy step (call before the runtime starts).

    Once jax is installed (the JAX step needs it), torch_xla imports torchax at the first `mark_sharding`, and
    torchax registers itself as torch's PrivateUse1 device "jax" without the hooks torch asks such a device for:
    torch.distributed's barrier then fails between hosts ("Please register PrivateUse1HooksInterface"), Accelerate's
    free_memory empties its "cache" (an internal assert) and torch.distributed.checkpoint's writer asks it for a
    stream. Marked missing, torch_xla takes its path without it, as when jax is not installed.
    """
    sys.modules.setdefault("torchax", None)


def torchax_for_the_jax_step() -> None:
    """Let torchax in for the JAX step (undoing keep_torchax_out), draw its random bits as a TPU does best, and keep it
    from passing for this machine's accelerator: Accelerate's free_memory and torch.distributed.checkpoint's writer
    ask for it only when it says it is available. torch.distributed's barrier still fails with it: the hosts' barrier
    is gloo's monitored one (launch/processes.py)."""
    if "torchax" in sys.modules and sys.modules["torchax"] is None:
        del sys.modules["torchax"]
    import jax
    import torchax.device_module

    torchax.device_module.is_available = lambda: False
    # Random bits (dropout's masks) from the "unsafe_rbg" generator, the TPU's own bit generator, for every key the
    # step makes (torchax's too), as MaxText sets it. With jax's default, threefry, anywhere in it, libtpu 0.0.21's
    # compile of bert-base-cased's step (16 x 128, bf16) for a v5e was stopped after 25 minutes; with this, 103 s (a
    # 1-layer BERT: 111 s against 21 s). Its masks are as random for dropout. Set once a process: jax's global default.
    jax.config.update("jax_default_prng_impl", "unsafe_rbg")


def ready_for_a_jax_call(tensors: list) -> None:
    """What a JAX function called through torch_xla needs (the step's, jax_eval.py's): torchax set up, jax on this
    process's platform, and every input marked with a sharding."""
    import torch_xla

    from .sharding import replicate_under_spmd

    torchax_for_the_jax_step()
    if os.environ.get("PJRT_DEVICE", "").upper() == "CPU":
        # jax lowers the function for torch_xla's platform: on the CPU, its own CPU. Left to choose, it first tries
        # the TPU plugin libtpu (the plan extra installs it), which prints a page of errors where there is no TPU.
        import jax

        jax.config.update("jax_platforms", "cpu")
    # Under SPMD, an input without a sharding (FSDPv2 leaves buffers unmarked) comes out of the first call marked
    # replicated, and the second call was another graph: marked so from the start.
    for tensor in tensors:
        if not torch_xla._XLAC._get_xla_sharding_spec(tensor):
            replicate_under_spmd(tensor)
