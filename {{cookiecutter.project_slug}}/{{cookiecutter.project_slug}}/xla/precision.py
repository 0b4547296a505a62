"""The precision switches torch_xla reads (XLA_USE_BF16, XLA_DOWNCAST_BF16) and a check of what a graph lowers to."""

import os
import re


def request_variables(variables: dict) -> None:
    """Set the bf16 variables; torch_xla reads them when the first tensor reaches an XLA device."""
    os.environ.update(variables)
    # Accelerate's own switch, so that nothing in Accelerate asks for the downcast level on its own.
    os.environ.pop("ACCELERATE_DOWNCAST_BF16", None)


def lowered_types(device) -> tuple[str, str, str]:
    """Element types of a float32 product, a float64 product and a float32 matmul under autocast in this process."""
    import torch
    import torch_xla

    f32 = torch.ones(2, 2, dtype=torch.float32, device=device)
    f64 = torch.ones(2, dtype=torch.float64, device=device)
    with torch.autocast("xla", dtype=torch.bfloat16):
        autocast_product = f32 @ f32
    found = []
    for tensor in (f32 @ f32, f64 * 3, autocast_product):
        text = torch_xla._XLAC._get_xla_tensors_text([tensor])  # the pending graph, as torch_xla's IR text
        root = [line for line in text.splitlines() if "ROOT=" in line]
        match = re.search(r"=\s*(bf16|f16|f32|f64)\[", root[0]) if root else None
        found.append(match.group(1) if match else "unknown")
    return found[0], found[1], found[2]
