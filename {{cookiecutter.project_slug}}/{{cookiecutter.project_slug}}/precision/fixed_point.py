"""Loss sums that stay exact in every precision level: whole numbers of 2**-FRACTION_BITS, summed as int64.

Under XLA_USE_BF16 every float on the device is bf16, float64 too: a running float sum of losses would move in
steps that grow with it (a step of 2 once it passes 256). Each loss is rounded to a multiple of 2**-24 instead
(an error below 3e-8 each), and the integers add up exactly: int64 holds a sum of up to 5e11 nats.
Multiplying by a power of two is exact in bf16 as in float32, so the rounding is the only error.
"""

import torch

FRACTION_BITS = 24
SCALE = float(2**FRACTION_BITS)


def to_fixed(losses):
    """Losses (any float type, any shape) as int64 multiples of 2**-24, on their device."""
    return torch.round(losses * SCALE).long()


def finite_to_fixed(losses):
    """(the losses as to_fixed gives them, 0 where not finite; 1 where not finite, else 0), both int64: a NaN would
    make an integer sum meaningless, so it is counted instead (the loss guard's steps, the evaluations' examples)."""
    finite = torch.isfinite(losses)
    return torch.where(finite, to_fixed(losses), 0), (~finite).long()


def from_fixed(total) -> float:
    """A summed int64 (a Python int, read from the device) back in nats."""
    return int(total) / SCALE
