"""The precision policy: which level was asked for, how it is realised, and proof that it was.

Levels, by what the device stores and what is lost:
  fp32                everything float32. Nothing lost; full bytes, slowest matmuls.
  bf16 (the default)  weights, gradients and AdamW's moments float32; the forward runs under
                      torch.autocast(bfloat16), so matmuls compute in bf16. Every update is kept.
  pure-bf16-xla       the guide's XLA_USE_BF16: every float32 and float64 is bf16 on the device.
  pure-bf16-downcast  the guide's XLA_DOWNCAST_BF16: float32 is bf16, float64 becomes float32.
  pure-bf16-cast      model.to(torch.bfloat16), what torch_xla now asks for instead of the two variables.
The pure levels store weights and optimizer state in half the bytes, and lose every AdamW update smaller
than half a bf16 step of its weight (bf16 has 8 significant bits): at a fine-tuning learning rate, most of
them (bf16_updates.py measures how many, and --kahan_summation keeps them).

The XLA variables are read once per process, when the first tensor reaches the device, so they are set
before that and then checked in a lowered graph. Accelerate gets mixed_precision="no" on every level: on a
TPU its bf16 would set XLA_USE_BF16 itself (the pure level), and on XLA:CPU it would autocast where a TPU
does not; the project applies its own autocast at one spot (`apply_to_model`) on every device.
"""

import functools
import os
from dataclasses import asdict, dataclass, field
from types import MethodType

import torch

from ..config import PURE_BF16_CHOICES, ConfigError, UserError
from ..config.groups import PrecisionOptions
from ..xla import precision as xla_precision
from ..xla.device import uses_xla
from ..xla.precision import lowered_types  # noqa: F401  (part of this module's interface: the graph check)

BAKED_MIXED_PRECISION = {{ cookiecutter.mixed_precision | tojson }}
BAKED_PURE_BF16 = {{ cookiecutter.pure_bf16 | tojson }}

# What a float32 and a float64 tensor must lower to on an XLA device, for the XLA variables each level sets.
PROMISED_TYPES = {
    "fp32": ("f32", "f64"),
    "bf16": ("f32", "f64"),
    "pure-bf16-xla": ("bf16", "bf16"),
    "pure-bf16-downcast": ("bf16", "f32"),
    "pure-bf16-cast": ("f32", "f64"),
}
XLA_OFF = {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "0"}
XLA_VARIABLES = {
    **{level: XLA_OFF for level in PROMISED_TYPES},
    "pure-bf16-xla": {"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "0"},
    "pure-bf16-downcast": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "1"},
}
# What each level keeps in which type: the report's `stored`.
STORED = {
    "fp32": {"weights": "float32", "gradients": "float32", "optimizer state": "float32", "compute": "float32"},
    "bf16": {"weights": "float32", "gradients": "float32", "optimizer state": "float32",
             "compute": "bf16 matmuls (torch.autocast); softmax, norms and losses in float32"},
    "pure-bf16-xla": {"weights": "bf16", "gradients": "bf16", "optimizer state": "bf16",
                      "compute": "bf16, float64 too (XLA_USE_BF16)"},
    "pure-bf16-downcast": {"weights": "bf16", "gradients": "bf16", "optimizer state": "bf16",
                           "compute": "bf16; float64 as float32 (XLA_DOWNCAST_BF16)"},
    "pure-bf16-cast": {"weights": "bf16", "gradients": "bf16", "optimizer state": "bf16",
                       "compute": "bf16; what the model upcasts itself stays float32"},
}
TRUE_WORDS = ("1", "true", "yes")


class PrecisionUnavailable(UserError, RuntimeError):
    """A level was asked for and nothing on this machine can deliver it."""


@dataclass
class PrecisionReport:
    requested: str
    effective: str
    via: str
    verified: str
    autocast: bool = False  # the forward runs under torch.autocast(bfloat16)
    kahan_summation: bool = False  # the optimizer keeps the rounded-away part of each update (optimi)
    stored: dict = field(default_factory=dict)
    # Pure levels without compensation: what the bf16 rounding takes from AdamW's updates (bf16_updates.py).
    updates_at_risk: dict | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _launcher_request() -> str | None:
    """The pure level a launcher or the user's environment asked for with the guide's variables.

    On a TPU `accelerate launch` with mixed_precision bf16 sets only these (the generated configs say
    "no" and leave the choice to the script's flags, see configs/tpu-vm.yaml).
    """
    if os.environ.get("XLA_DOWNCAST_BF16") == "1" or (
        os.environ.get("ACCELERATE_DOWNCAST_BF16", "").strip().lower() in TRUE_WORDS
    ):
        return "downcast"
    if os.environ.get("XLA_USE_BF16") == "1":
        return "xla"
    return None


def requested_level(options: PrecisionOptions) -> str:
    """The level asked for: train.py's flags, else the launcher's settings, else the baked answers."""
    launcher = _launcher_request()
    mixed = (
        options.mixed_precision
        or os.environ.get("ACCELERATE_MIXED_PRECISION")
        or ("bf16" if launcher else BAKED_MIXED_PRECISION)
    )
    if mixed not in ("bf16", "no"):
        raise ConfigError(f"mixed_precision={mixed!r}: must be bf16 or no (TPUs do not take fp16)")
    pure = options.pure_bf16 or launcher or (BAKED_PURE_BF16 if mixed == "bf16" else "no")
    if pure not in PURE_BF16_CHOICES:
        raise ConfigError(f"pure_bf16={pure!r}: must be one of {', '.join(PURE_BF16_CHOICES)}")
    if mixed == "no" and pure != "no" and (options.pure_bf16 or options.mixed_precision is None):
        raise ConfigError(f"pure_bf16={pure!r} needs mixed_precision=bf16 (float32 was asked for)")
    level = "fp32" if mixed == "no" else ("bf16" if pure == "no" else f"pure-bf16-{pure}")
    if options.kahan_summation and not level.startswith("pure-"):
        raise ConfigError(
            f"kahan_summation=True: only with pure bf16 weights (--pure_bf16 xla, downcast or cast); "
            f"the {level} level keeps float32 weights, which keep every update already"
        )
    return level


def accelerate_mixed_precision(level: str) -> str:
    """What a launcher is told (notebook_launcher passes it to its workers as ACCELERATE_MIXED_PRECISION).

    Only the script's Accelerator ignores it: it always gets "no", and the level is applied here.
    """
    return "no" if level == "fp32" else "bf16"


def set_xla_variables(level: str) -> None:
    """Ask torch_xla for the level; must run before the first tensor reaches an XLA device."""
    xla_precision.request_variables(XLA_VARIABLES[level])


def describe(types) -> str:
    return f"f32->{types[0]}, f64->{types[1]} in graph"


def realise(level: str, device, kahan_summation: bool = False) -> PrecisionReport:
    """Check the level in a lowered graph; say how it is delivered and what it stores."""
    effective, via, verified = _deliver(level, device)
    return PrecisionReport(
        level, effective, via, verified, autocast=effective == "bf16", kahan_summation=kahan_summation,
        stored={**STORED[effective], **({"Kahan compensation": "bf16, one more weight-sized buffer"}
                                        if kahan_summation else {}),
                "loss sums": "int64 in units of 2**-24 (precision/fixed_point.py): exact in every level"},
    )


def _deliver(level: str, device) -> tuple[str, str, str]:
    if level == "bf16":
        via = f"torch.autocast({'xla' if uses_xla(device) else device.type}, bfloat16) around the forward"
    else:
        via = {"fp32": "no mixed precision", "pure-bf16-cast": "model.to(torch.bfloat16)",
               "pure-bf16-xla": "XLA_USE_BF16", "pure-bf16-downcast": "XLA_DOWNCAST_BF16"}[level]
    if not uses_xla(device):
        if level in ("pure-bf16-xla", "pure-bf16-downcast"):
            return "pure-bf16-cast", "model.to(torch.bfloat16)", f"{via} has no effect off XLA; parameters cast to bfloat16"
        return level, via, "off XLA: nothing to check"
    types = lowered_types(device)
    if types[:2] == PROMISED_TYPES[level] and (level != "bf16" or types[2] == "bf16"):
        extra = f", autocast matmul -> {types[2]}" if level == "bf16" else ""
        return level, via, describe(types) + extra
    if level in ("pure-bf16-xla", "pure-bf16-downcast"):
        return "pure-bf16-cast", "model.to(torch.bfloat16)", f"{via} ignored ({describe(types)}); parameters cast to bfloat16"
    if types[:2] != PROMISED_TYPES[level]:
        raise PrecisionUnavailable(f"{level} was requested but the graph holds {describe(types)}: unset XLA_USE_BF16")
    raise PrecisionUnavailable(f"bf16 was requested but a matmul under torch.autocast(xla) lowers to {types[2]}")


def casts_model(report: PrecisionReport) -> bool:
    """Whether parameters are cast to torch.bfloat16 before training.

    With Kahan summation the XLA-variable levels are cast too (their device already stores bf16, so the bytes
    do not change): optimi enables its compensation by the parameter's torch dtype, and under XLA_USE_BF16 /
    XLA_DOWNCAST_BF16 torch still calls a bf16 parameter float32 (optimi 0.3's `_init_state` and steps).
    """
    return report.effective == "pure-bf16-cast" or (report.kahan_summation and report.effective.startswith("pure-"))


def apply_to_model(model, report: PrecisionReport, device):
    """The level's one change to the model before it is placed: a bf16 cast, or autocast around its forward.

    The forward is wrapped on the plain model, so every wrapper (DDP, FSDPv2) and every caller (training,
    evaluation, benchmarks) runs it under autocast, and the backward runs outside it (as torch advises).
    `_original_forward` is Accelerate's own mark, so its unwrap_model can undo the wrap.
    """
    if casts_model(report):
        return model.to(torch.bfloat16)
    if report.autocast:
        device_type = "xla" if uses_xla(device) else device.type
        forward = model.forward.__func__

        @functools.wraps(forward)
        def autocast_forward(self, *args, **kwargs):
            with torch.autocast(device_type, dtype=torch.bfloat16):
                return forward(self, *args, **kwargs)

        model._original_forward = model.forward
        model.forward = MethodType(autocast_forward, model)
    return model


def metric_dtype(report: PrecisionReport) -> torch.dtype:
    """dtype the losses of evaluation are computed in from the logits (their sums are fixed_point's integers).

    Under XLA_DOWNCAST_BF16 only float64 stays wide (as float32); under XLA_USE_BF16 every float is bf16.
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
