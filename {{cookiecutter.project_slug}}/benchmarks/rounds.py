"""Ratios of two loops run side by side, round after round.

On a shared CPU host a single run's speed moves with whatever else runs (this suite's 2-core machine: 20 % from
one process to the next), so a comparison runs the loops one after the other, `profile.steady_rounds` times, and
takes a ratio per round: the two runs of a round met about the same load. Their median is the figure; their
range says how far one round could be trusted alone. Each round runs the two in the other order than the last, so
that a machine that slows down (or speeds up) over the rounds favours neither.
"""

import statistics
from collections.abc import Callable


def over_rounds(mine: list[float], theirs: list[float]) -> tuple[float, str]:
    """The median of the rounds' ratios mine / theirs, and their range as text ("0.71-0.88")."""
    ratios = [value / other for value, other in zip(mine, theirs, strict=True)]
    return statistics.median(ratios), f"{min(ratios):.3g}-{max(ratios):.3g}"


def alternating(rounds: int, mine: Callable[[int], dict], theirs: Callable[[int], dict]) -> tuple[list, list]:
    """Each loop's results over `rounds` rounds, `mine(index)` first in even rounds and `theirs(index)` first in odd
    ones."""
    results = ([], [])
    for index in range(rounds):
        for which in ((0, 1) if index % 2 == 0 else (1, 0)):
            results[which].append((mine, theirs)[which](index))
    return results
