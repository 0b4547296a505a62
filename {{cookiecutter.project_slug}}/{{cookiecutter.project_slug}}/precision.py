"""The precision policy: which bf16 level was asked for, how it is realised, and proof that it was.

Levels (the guide's two, plus none):
  fp32           everything float32
  bf16           XLA_USE_BF16: float32 and float64 both become bf16 on the device
  bf16+downcast  XLA_DOWNCAST_BF16: float32 becomes bf16, float64 becomes float32,
                 so code that asks for float64 (metrics, logged losses) gets real float32

The XLA variables are read once per process, when the first tensor reaches the
device, so they are set before that and then checked in a lowered graph. Accelerate
sets them only on TPUs and has no `downcast_bf16` argument; this module does both
jobs on every XLA device and keeps Accelerate's own view consistent.
"""

import os
import re
from dataclasses import asdict, dataclass

import torch

from .config import ConfigError, TrainConfig
from .devices import uses_xla

BAKED_MIXED_PRECISION = {{ cookiecutter.mixed_precision | tojson }}
BAKED_DOWNCAST_BF16 = {{ cookiecutter.downcast_bf16 }}

# What each level must do to a float32 and a float64 tensor on an XLA device.
PROMISED_TYPES = {
    "fp32": ("f32", "f64"),
    "bf16": ("bf16", "bf16"),
    "bf16+downcast": ("bf16", "f32"),
}
XLA_VARIABLES = {
    "fp32": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "0"},
    "bf16": {"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "0"},
    "bf16+downcast": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "1"},
}
TRUE_WORDS = ("1", "true", "yes")


class PrecisionUnavailable(RuntimeError):
    """bf16 was asked for and nothing on this machine can deliver it."""


@dataclass
class PrecisionReport:
    requested: str
    effective: str
    via: str
    verified: str
    # Whether the prepared model's forward runs under torch.autocast (read from the model after prepare).
    autocast: bool | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _launcher_request() -> tuple[str, bool] | None:
    """What `accelerate launch` asked for on a TPU, where it sets only the XLA variables."""
    if os.environ.get("XLA_DOWNCAST_BF16") == "1":
        return "bf16", True
    if os.environ.get("XLA_USE_BF16") == "1":
        return "bf16", False
    return None


def requested_level(config: TrainConfig) -> str:
    """The level asked for: train.py's flags, else the launcher's settings, else the baked answers."""
    launcher = _launcher_request()
    mixed = (
        config.mixed_precision
        or os.environ.get("ACCELERATE_MIXED_PRECISION")
        or (launcher[0] if launcher else BAKED_MIXED_PRECISION)
    )
    if config.downcast_bf16 is not None:
        downcast = config.downcast_bf16
    elif "ACCELERATE_DOWNCAST_BF16" in os.environ:
        downcast = os.environ["ACCELERATE_DOWNCAST_BF16"].strip().lower() in TRUE_WORDS
    elif launcher:
        downcast = launcher[1] and mixed == "bf16"
    else:
        downcast = BAKED_DOWNCAST_BF16 and mixed == "bf16"
    if mixed not in ("bf16", "no"):
        raise ConfigError(f"mixed_precision={mixed!r}: must be bf16 or no (TPUs do not take fp16)")
    if downcast and mixed != "bf16":
        raise ConfigError("downcast_bf16 needs mixed_precision=bf16 (Accelerate's rule)")
    if mixed == "no":
        return "fp32"
    return "bf16+downcast" if downcast else "bf16"


def accelerate_mixed_precision(level: str) -> str:
    return "no" if level == "fp32" else "bf16"


def set_xla_variables(level: str) -> None:
    """Ask torch_xla for the level; must run before the first tensor reaches an XLA device."""
    os.environ.update(XLA_VARIABLES[level])
    # Accelerate's own switch, so that its TPU code path sets the same variables.
    if level == "bf16+downcast":
        os.environ["ACCELERATE_DOWNCAST_BF16"] = "true"
    else:
        os.environ.pop("ACCELERATE_DOWNCAST_BF16", None)


def lowered_types(device) -> tuple[str, str]:
    """Element types a float32 and a float64 computation get in this process's XLA graph."""
    import torch_xla

    f32 = torch.ones(2, 2, dtype=torch.float32, device=device)
    f64 = torch.ones(2, dtype=torch.float64, device=device)
    found = []
    for tensor in (f32 @ f32, f64 * 3):
        text = torch_xla._XLAC._get_xla_tensors_text([tensor])
        root = [line for line in text.splitlines() if "ROOT=" in line]
        match = re.search(r"=\s*(bf16|f16|f32|f64)\[", root[0]) if root else None
        found.append(match.group(1) if match else "unknown")
    return found[0], found[1]


def describe(types: tuple[str, str]) -> str:
    return f"f32->{types[0]}, f64->{types[1]} in graph"


def decide_autocast(accelerator) -> bool:
    """Whether forward passes run under torch.autocast: the project decides, not Accelerate's device check.

    Accelerate 1.15 sets `native_amp` for bf16 on an XLA device that is not a TPU (XLA:CPU) and wraps
    `model.forward` in torch.autocast, but not on a TPU (`is_bf16_available(ignore_tpu=True)`). The graphs
    tested on XLA:CPU would then not be the ones a TPU runs. On every XLA device bf16 comes from the XLA
    variables (or a model cast) instead, so autocast is turned off here, at this one spot.
    """
    if uses_xla(accelerator.device):
        accelerator.native_amp = False
    return accelerator.native_amp


def forward_autocast(accelerator, model) -> bool:
    """Read from the prepared model: Accelerate keeps the unwrapped forward in `_original_forward`."""
    return hasattr(accelerator.unwrap_model(model), "_original_forward")


def realise(level: str, device, native_amp: bool) -> PrecisionReport:
    """Check the level in a lowered graph; say how it is (or will be) delivered."""
    if not uses_xla(device):
        if level == "fp32":
            return PrecisionReport(level, level, "no mixed precision", "off XLA: nothing to check")
        if not native_amp:
            raise PrecisionUnavailable(f"bf16 was requested but Accelerate cannot autocast on {device}")
        # Off XLA there is no float64-to-float32 switch: downcast means bf16 compute, float32 metrics.
        return PrecisionReport(level, level, f"torch.autocast({device.type}, bfloat16)", "autocast context active")
    types = lowered_types(device)
    variable = {"fp32": "none", "bf16": "XLA_USE_BF16", "bf16+downcast": "XLA_DOWNCAST_BF16"}[level]
    if types == PROMISED_TYPES[level]:
        return PrecisionReport(level, level, variable, describe(types))
    if level == "fp32":
        raise PrecisionUnavailable(f"float32 was requested but the graph holds {describe(types)}: unset XLA_USE_BF16")
    return PrecisionReport(
        level,
        "bf16 (model cast)",
        "model.to(torch.bfloat16)",
        f"{variable} ignored ({describe(types)}); parameters cast to bfloat16",
    )


def uses_model_cast(report: PrecisionReport) -> bool:
    return report.via == "model.to(torch.bfloat16)"


def metric_dtype(report: PrecisionReport) -> torch.dtype:
    """dtype to accumulate metrics in so that the device computes them in float32.

    Under XLA_DOWNCAST_BF16 only float64 stays wide (as float32); under plain
    XLA_USE_BF16 every float is bf16, the cost the guide names for that level.
    """
    return torch.float64 if report.via == "XLA_DOWNCAST_BF16" else torch.float32


TYPE_BYTES = {"f32": 4, "f64": 8, "bf16": 2}


def bytes_on_device(report: PrecisionReport):
    """`size(tensor, elements)`: bytes as the device stores them.

    Under XLA_USE_BF16 / XLA_DOWNCAST_BF16 torch still calls a parameter float32 while the device holds
    bf16 (the types the lowered graph showed); otherwise the tensor's own element size.
    """
    stored = PROMISED_TYPES[report.effective] if report.via.startswith("XLA_") else None

    def size(tensor, elements: int) -> int:
        if stored and tensor.dtype in (torch.float32, torch.float64):
            return elements * TYPE_BYTES[stored[tensor.dtype == torch.float64]]
        return elements * tensor.element_size()

    return size
