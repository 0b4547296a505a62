"""Check, just before `notebook_launcher`, that the notebook's process has not used a device.

The launcher forks the training processes from the notebook's own process. A forked
child cannot use an XLA runtime (or an Accelerate state) that its parent already set
up: the run fails later with an error that does not name the cause. This guard finds
the cause first and says which cell to move and that the runtime must be restarted.
It also refuses one setting that would run but silently split the training.

It only reads state (torch_xla's "runtime initialised" flag, the one `xmp.spawn`
itself checks, and Accelerate's shared state); it never starts anything itself.
"""

import os
import re
import sys

from ..config.errors import UserError
from ..xla import runtime

# Code that sets up a device or Accelerate's state when it runs in a notebook cell.
DEVICE_CODE = re.compile(
    r"\bAccelerator\s*\(|\bPartialState\s*\(|\bAcceleratorState\s*\(|xla_device\s*\(|torch_xla\.device\s*\("
    r"|\.to\(\s*['\"]?(xla|cuda|device)|device\s*=\s*['\"]?(xla|cuda)|\.cuda\s*\("
)
RESTART = (
    "then restart the runtime (Colab: Runtime > Restart session; Kaggle: Run > Restart & clear cell outputs; "
    "Jupyter: Kernel > Restart) and run the cells from the top"
)


class UnsafeLaunch(UserError, RuntimeError):
    """Launching now would fail or go wrong (a device already used, a setting that splits the run)."""


def on_hosted_tpu() -> bool:
    """Where `notebook_launcher` hands over to torch_xla (one process per chip): Colab or Kaggle with a TPU."""
    hosted = any(key.startswith("KAGGLE") for key in os.environ) or "google.colab" in sys.modules
    return hosted and ("TPU_NAME" in os.environ or os.environ.get("PJRT_DEVICE", "") == "TPU")


def xla_runtime_started() -> bool:
    return runtime.started()  # only looks if torch_xla was imported: importing it here would change nothing


def accelerate_state_created() -> bool:
    if "accelerate" not in sys.modules:
        return False
    from accelerate.state import AcceleratorState, PartialState

    return bool(AcceleratorState._shared_state or PartialState._shared_state)


def cuda_started() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def suspect_cells(history) -> list[str]:
    """'[n] first line' for each earlier cell whose code looks like it set up a device."""
    found = []
    for number, source in enumerate(history or []):
        if source and DEVICE_CODE.search(source):
            lines = [line for line in source.splitlines() if DEVICE_CODE.search(line)]
            found.append(f"[{number}] {lines[0].strip()[:80]}")
    return found


def notebook_history() -> list[str] | None:
    """The sources of the cells run so far (IPython's `In`), or None outside IPython."""
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else shell.user_ns.get("In")


def device_problems(model=None) -> list[str]:
    """How this process already used a device, one sentence each (empty when it has not)."""
    found = []
    if xla_runtime_started():
        found.append("the XLA runtime was started (a tensor was put on an XLA device, "
                     "torch_xla.device() / xm.xla_device() was called, or a one-process run already trained here)")
    if accelerate_state_created():
        found.append("an Accelerator (or PartialState) was created "
                     "(by a cell, or by a one-process run that already trained here)")
    if cuda_started():
        found.append("CUDA was initialised")
    if model is not None:
        devices = sorted({str(parameter.device) for parameter in model.parameters()} - {"cpu"})
        if devices:
            found.append(f"the model is on {', '.join(devices)} (build it on the CPU and leave it there: "
                         "the training function moves it to each process's device)")
    return found


def setting_problems(num_processes: int) -> list[str]:
    """Launch settings that would run, but not as one training (empty when fine)."""
    if num_processes > 1 and not on_hosted_tpu() and runtime.installed():
        return [f"num_processes={num_processes} outside a Colab/Kaggle TPU runtime with torch_xla installed: "
                "each forked worker would see torch_xla's single device and train alone (separate runs, not one "
                "run on several devices). Set num_processes to 1 in the configuration cell."]
    return []


def check_before_launch(model=None, num_processes: int = 1, history=None) -> None:
    """Raise UnsafeLaunch if launching now would fail or go wrong; the message says what to do."""
    touched, settings = device_problems(model), setting_problems(num_processes)
    if not touched and not settings:
        return
    parts = []
    if touched:
        cells = suspect_cells(history if history is not None else notebook_history())
        where = (
            "Move these cells into training_function (or delete them): " + "; ".join(cells)
            if cells else "Move the cell that did this into training_function (or delete it)"
        )
        parts.append(
            "A device was used in this notebook's process before the launch: " + "; ".join(touched) + ".\n"
            + where + ",\n" + RESTART + ". Only the training function may use a device: "
            "the launcher forks the training processes from this one."
        )
    parts += settings
    raise UnsafeLaunch("Cannot launch.\n" + "\n".join(parts))
