"""Which element types a precision mode promises, which ones reach the graph, and what the tensors weigh.

A mode is only timed when its graph holds what it promises: the float32/float64
probe of `precision.lowered_types` must match `precision.PROMISED_TYPES` for the
precision level whose XLA variables the mode sets, and every matrix multiply of the
training step must run in the mode's compute type. A flag that never reaches the graph (set too late,
ignored by a newer torch_xla, or by an XLA device that does not honour it) is
therefore reported as failed instead of being timed as if it worked.
"""

import re
from collections import Counter
from dataclasses import dataclass

from {{ cookiecutter.project_slug }}.precision.levels import PROMISED_TYPES

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear", "aten::einsum")
# One line of torch_xla's IR text: "%7 = bf16[16,64]{1,0} aten::mm(%5, %6), xla_shape=...".
IR_LINE = re.compile(r"=\s*(?P<type>[a-z]+[0-9]*)\[[^\]]*\]\S*\s+(?P<op>[a-z_]+::[A-Za-z_]+)\(")
BYTES_PER_ELEMENT = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "s64": 8, "s32": 4, "u8": 1, "s8": 1, "pred": 1}


@dataclass(frozen=True)
class Mode:
    name: str
    xla_level: str  # the precision level (precision.PROMISED_TYPES) whose XLA variables the mode's process sets
    compute_type: str  # what every matmul of the step must run in
    cast_model: bool = False
    autocast: bool = False
    how: str = ""


MODES = {
    mode.name: mode
    for mode in (
        # The modes are the project's precision levels, each named by how it is realised.
        Mode("fp32", "fp32", "f32", how="nothing set"),
        Mode("xla-use-bf16", "pure-bf16-xla", "bf16", how="XLA_USE_BF16=1"),
        Mode("xla-downcast-bf16", "pure-bf16-downcast", "bf16", how="XLA_DOWNCAST_BF16=1"),
        Mode("model-cast", "pure-bf16-cast", "bf16", cast_model=True, how="model.to(torch.bfloat16)"),
        Mode("autocast", "bf16", "bf16", autocast=True, how='torch.autocast("xla", dtype=torch.bfloat16)'),
    )
}


def matmul_types(ir_text: str) -> dict[str, int]:
    """Count the matrix multiplies of a lowered graph by element type."""
    counts = Counter()
    for line in ir_text.splitlines():
        match = IR_LINE.search(line)
        if match and match.group("op") in MATMUL_OPS:
            counts[match.group("type")] += 1
    return dict(counts)


def check(mode: Mode, probe: tuple[str, ...], matmuls: dict[str, int]) -> str | None:
    """None when the graph holds what the mode promises, else why not.

    `probe` starts with what a float32 and a float64 tensor lower to (precision.lowered_types adds the type of
    a matmul under autocast, which the step's own matmuls check here).
    """
    promised_probe = PROMISED_TYPES[mode.xla_level]
    if tuple(probe[:2]) != promised_probe:
        return (
            f"{mode.how}: float32/float64 lower to {probe[0]}/{probe[1]}, "
            f"expected {promised_probe[0]}/{promised_probe[1]}"
        )
    if not matmuls:
        return "no matrix multiply found in the step's graph"
    wrong = {kind: count for kind, count in matmuls.items() if kind != mode.compute_type}
    if wrong:
        found = ", ".join(f"{count} in {kind}" for kind, count in sorted(wrong.items()))
        return f"{mode.how}: {found} of {sum(matmuls.values())} matmuls, expected all in {mode.compute_type}"
    return None


def describe(probe: tuple[str, ...], matmuls: dict[str, int]) -> str:
    kinds = "+".join(f"{kind}x{count}" for kind, count in sorted(matmuls.items())) or "none"
    return f"f32->{probe[0]}, f64->{probe[1]}, matmuls {kinds}"


# One input of a lowered graph: "%0 = bf16[10,10]{1,0} xla::device_data(), xla_shape=...".
DEVICE_DATA = re.compile(r"=\s*(?P<type>[a-z]+[0-9]*)\[(?P<dims>[0-9,]*)\]\S*\s+xla::device_data\(")


def graph_bytes(tensors) -> int:
    """Bytes the tensors occupy on the device, read from the graph, not from their torch dtype.

    torch_xla's IR of the tensors lists each as device data with the element type the device stores
    (under XLA_USE_BF16 a tensor still says float32 to Python but is bf16 data). Call after a sync, so
    that the tensors are device data rather than pending computations.
    """
    import torch_xla

    # Only what lives on the device: AdamW keeps its step counters as host tensors.
    on_device = [tensor for tensor in tensors if tensor.device.type == "xla"]
    if not on_device:
        return 0
    text = torch_xla._XLAC._get_xla_tensors_text(on_device)
    total = 0
    for match in DEVICE_DATA.finditer(text):
        elements = 1
        for size in filter(None, match.group("dims").split(",")):
            elements *= int(size)
        total += elements * BYTES_PER_ELEMENT[match.group("type")]
    return total


def optimizer_tensors(optimizer):
    import torch

    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value
