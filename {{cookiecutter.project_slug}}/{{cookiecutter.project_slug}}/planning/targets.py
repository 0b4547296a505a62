"""The TPUs a plan is made for: each generation's published figures, its list price, and the slices `--tpu` names.

Figures per chip, from Google's pages for each generation (cloud.google.com/tpu/docs/v4, v5e, v5p, v6e): HBM, peak
dense bf16 FLOP/s, HBM bandwidth. `usable_hbm` is what libtpu 0.0.21's compiler allows a program on one chip (its
"Used X of Y hbm" when a step does not fit, read on this project's machine for each generation): less than the
published HBM, and the figure a plan is checked against. Prices: on-demand US dollars per chip-hour in us-central1
(v4: us-central2, its only region) from cloud.google.com/tpu/pricing as SkyPilot's catalog (catalogs/v8/gcp/vms.csv)
lists each slice, divided by its chips; the jax-ml scaling book (2025-02-18) gives the same v5e and v5p prices.
Read 2026-12-06. Prices change, differ by region, and commitments and spot capacity cost less: --price_per_chip_hour
overrides them.
"""

import re
from dataclasses import dataclass

from ..config.errors import UserError

GIB = 2 ** 30
PRICES_READ = "2026-12-06"


@dataclass(frozen=True)
class Chip:
    generation: str
    hbm_bytes: int
    usable_hbm_bytes: int
    peak_bf16_flops: float
    hbm_bytes_per_second: float
    price_per_chip_hour: float
    price_region: str
    # How jax names a slice of it, and what a host holds (jax.experimental.topologies, as MaxText's
    # accelerator_to_spec_map.py names them): v4 and v5p are three-dimensional, their chips "megacore".
    topology_prefix: str
    chip_config: str
    three_dimensional: bool
    # v4 and v5p slice names count TensorCores (two a chip): a v4-8 is 4 chips. v5e and v6e names count chips.
    cores_per_chip: int


CHIPS = {
    "v4": Chip("v4", 32 * GIB, int(30.75 * GIB), 275e12, 1200e9, 3.22, "us-central2", "v4", "megacore", True, 2),
    "v5e": Chip("v5e", 16 * GIB, int(15.75 * GIB), 197e12, 819e9, 1.20, "us-central1", "v5e", "default", False, 1),
    "v5p": Chip("v5p", 95 * GIB, int(95.74 * GIB), 459e12, 2765e9, 4.20, "us-central1", "v5", "megacore", True, 2),
    "v6e": Chip("v6e", 32 * GIB, int(31.25 * GIB), 918e12, 1640e9, 2.70, "us-central1", "v6e", "default", False, 1),
}
ALIASES = {"v5litepod": "v5e"}
# The slices each generation is sold in, by chips, and their shape as jax names it (MaxText's table).
SHAPES = {
    False: {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"},
    True: {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8"},
}


@dataclass(frozen=True)
class Target:
    name: str
    chip: Chip
    chips: int

    def topology(self) -> tuple[str, tuple]:
        """(jax's topology name, chips per host bounds) of the program a chip runs: the slice's (hosts of 2x2 chips) in
        both layouts, as the JAX step runs them (one process drives a host's chips; the data layout's weights whole on
        each, parallel/data_spmd.py)."""
        if self.chips == 1:
            return f"{self.chip.topology_prefix}:{'1x1x1' if self.chip.three_dimensional else '1x1'}", (1, 1, 1)
        return f"{self.chip.topology_prefix}:{SHAPES[self.chip.three_dimensional][self.chips]}", (2, 2, 1)


class UnknownTarget(UserError, ValueError):
    pass


def known() -> list[str]:
    return [f"{chip.generation}-{count * chip.cores_per_chip}" for chip in CHIPS.values()
            for count in SHAPES[chip.three_dimensional]]


def parse(names: str) -> list[Target]:
    """'v5e-8,v6e-4' -> Targets; an unknown name raises UnknownTarget listing the known ones."""
    targets = []
    for name in (part.strip().lower() for part in names.split(",") if part.strip()):
        match = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
        generation = ALIASES.get(match.group(1), match.group(1)) if match else None
        chip = CHIPS.get(generation)
        if chip is None or int(match.group(2)) % chip.cores_per_chip or \
                int(match.group(2)) // chip.cores_per_chip not in SHAPES[chip.three_dimensional]:
            raise UnknownTarget(f"tpu={name!r}: not a TPU slice this plan knows; known: {', '.join(known())}")
        targets.append(Target(f"{chip.generation}-{match.group(2)}", chip, int(match.group(2)) // chip.cores_per_chip))
    if not targets:
        raise UnknownTarget(f"tpu: name at least one slice, e.g. v5e-8; known: {', '.join(known())}")
    return targets
