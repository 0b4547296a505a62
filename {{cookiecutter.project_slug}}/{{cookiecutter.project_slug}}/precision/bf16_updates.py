"""What bf16 weights do to AdamW's updates, and what keeps them (Kahan summation: loop/optimizers.py builds it).

A bf16 number has 8 significant bits: the spacing between neighbours of a weight w is 2**(floor(log2|w|) - 7).
AdamW moves each weight by about the learning rate per step (its normalised update is at most about 1), so
where half that spacing exceeds the rate the update rounds back to the weight and is lost. At 2e-5 (a typical
fine-tuning rate) that is every weight of magnitude 2**-7 = 0.0078 or more: about 69 % of the default model's
weight elements as transformers initializes them (tests/test_precision.py counts it).

Kahan summation keeps, per weight, the part of each update the rounding dropped, and adds it back at the next
step (one more weight-sized bf16 buffer). The optimizer is torch-optimi's AdamW, which implements it.
"""

import math

import torch


def lost_above(learning_rate: float) -> float:
    """The smallest weight magnitude at which a step of `learning_rate` is surely below half a bf16 spacing."""
    exponent = math.floor(math.log2(learning_rate)) + 1  # 2**exponent > learning_rate
    return 2.0 ** (exponent + 8)  # half the spacing at 2**(exponent + 8) is 2**exponent


def updates_at_risk(model, learning_rate: float) -> dict:
    """The fraction of trained weight elements whose every AdamW step rounds away, counted on the host (no graph).

    Called on the model before it is placed, so it compiles nothing and reads nothing back from a device. Frozen
    weights (a LoRA base) get no update to lose, so only the trainable ones count.
    """
    threshold = lost_above(learning_rate)
    lost = total = 0
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point() and parameter.requires_grad:
                lost += int((parameter.detach().abs() >= threshold).sum())
                total += parameter.numel()
    return {"learning_rate": learning_rate, "weights_at_or_above": threshold,
            "fraction_of_elements": lost / total if total else 0.0}


def warning(level: str, risk: dict) -> str:
    return (
        f"precision: {level} stores weights in bf16 without compensation: at learning rate "
        f"{risk['learning_rate']:g}, {risk['fraction_of_elements']:.1%} of weight elements are "
        f"{risk['weights_at_or_above']:g} or larger, where every AdamW update rounds away. "
        "Fix: --pure_bf16 no (bf16 compute, float32 weights) or --kahan_summation true"
    )
