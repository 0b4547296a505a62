"""Is the installed stack able to run as asked? Set-up mistakes become one readable line each.

Reads package metadata and device files only: nothing here imports torch_xla at import time (the XLA door,
xla/runtime.py, tries the import when asked) or touches a device (the notebook imports it in its device-free parent process).
"""

import glob
import importlib.metadata
import importlib.util
import os

from ..config.errors import UserError
from ..xla import runtime

xla_installed = runtime.installed  # a name of this module's own, so that a test can pretend torch_xla is there


class EnvironmentProblem(UserError, RuntimeError):
    """The installed stack cannot run as asked; the message says how to fix it."""


def installed_release(distribution: str) -> str | None:
    """The installed release (2.9.0, without +cu128), read from package metadata without importing it."""
    try:
        return importlib.metadata.version(distribution).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


# The libraries whose versions decide what a run does; the report names each (None: not installed).
REPORTED_LIBRARIES = ("torch", "torch_xla", "accelerate", "transformers", "datasets", "tokenizers", "peft", "kernels")


def versions() -> dict:
    """{library: its installed release} for the report: a run installed without constraints.txt says what it ran."""
    return {name: installed_release(name) for name in REPORTED_LIBRARIES}


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
    # Before the import below (seconds): a TPU asked for on a machine without one is told at once. libtpu alone is no
    # TPU: the plan extra installs it on any machine, to compile for a TPU without one (plan.py --compile).
    if wants_tpu and not tpu_device_files():
        raise EnvironmentProblem(
            "PJRT_DEVICE=TPU but this machine has no TPU (no /dev/accel* or /dev/vfio device): "
            "unset PJRT_DEVICE, or set PJRT_DEVICE=CPU for an XLA device on the CPU "
            "(on a TPU VM, `pip install -e '.[tpu]'`)"
        )
    if wants_tpu and not libtpu_installed():
        raise EnvironmentProblem(
            "PJRT_DEVICE=TPU but libtpu is not installed (the [tpu] extra is missing): run `pip install -e '.[tpu]'`"
        )
    reason = runtime.import_problem()
    if reason:
        raise EnvironmentProblem(
            f"torch_xla {xla_release} cannot be imported with torch {torch_release} ({reason}): {fix}"
        ) from None


def local_rank() -> str:
    """This process's index on its host, before any Accelerator exists (0 for a lone process)."""
    return os.environ.get("PJRT_LOCAL_PROCESS_RANK") or os.environ.get("LOCAL_RANK") or "0"


def check_tracker(report_to: str) -> None:
    """--report_to names a tracker whose library is installed (Accelerate would only warn, and log nothing)."""
    if report_to == "none":
        return
    modules = ("tensorboard", "tensorboardX") if report_to == "tensorboard" else (report_to,)
    if not any(importlib.util.find_spec(module) for module in modules):
        raise EnvironmentProblem(
            f"report_to={report_to!r}: {report_to} is not installed here: `pip install {report_to}`, or --report_to none"
        )
