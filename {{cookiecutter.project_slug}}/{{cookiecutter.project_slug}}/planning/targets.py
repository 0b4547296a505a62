"""The TPUs a plan is made for: each generation's published figures, its list price, and the slices `--tpu` names.

Figures per chip, from Google's pages for each generation (docs.cloud.google.com/tpu/docs/v4, v5e, v5p-training, v6e,
tpu7x; read 2026-12-07): HBM in GiB, as the current pages state it (older ones said "95GB" and "16 GB" for the same
chips), peak dense bf16 FLOP/s, HBM bandwidth in bytes a second (the pages' GBps, 10^9). `usable_hbm` is what libtpu
0.0.21's compiler allows a program on one chip (its "Used X of Y hbm" when a step does not fit, read on this project's
machine for each generation, in GiB like the published figures it sits under: 15.75 of 16, 31.25 of 32, 30.75 of
32), and the figure a plan is checked against. v5p's is 95.74 GiB, above the 95 GiB Google publishes (MaxText's table
says 96 GB): the published figure is rounded down, and the plan holds a v5p program to the published 95 GiB, 0.74 GiB
on the safe side. Chips per host as Google sells them: a v5e or v6e slice of 8 chips is one host (ct5lp-hightpu-8t,
ct6e-standard-8t), larger ones hosts of 4 (ct5lp-hightpu-4t, ct6e-standard-4t, as XPK builds them); v4, v5p and
TPU7x hosts hold 4 (2x2x1).

TPU7x (Ironwood): each chip is two devices (one TensorCore and 96 GiB of HBM each), and a run sees devices, so its
figures here are per device, half a chip's (2,307 TFLOP/s bf16, 192 GiB at 7,380 GBps a chip). libtpu 0.0.21 cannot
compile for it, so its usable figure is the published one, unmeasured, and Google publishes no on-demand price.

Prices: on-demand US dollars per chip-hour in us-central1 (v4: us-central2, its only region) from
cloud.google.com/tpu/pricing as SkyPilot's catalog (catalogs/v8/gcp/vms.csv) lists each slice, divided by its chips;
the jax-ml scaling book (2025-02-18) gives the same v5e and v5p prices. Read 2026-12-06. Prices change, differ by
region, and commitments and spot capacity cost less: --price_per_chip_hour overrides them.
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
    price_per_chip_hour: float | None
    price_region: str
    # How jax names a slice of it, and what a host holds (jax.experimental.topologies, as MaxText's
    # accelerator_to_spec_map.py names them): v4 and v5p are three-dimensional, their chips "megacore".
    topology_prefix: str
    chip_config: str
    three_dimensional: bool
    # v4, v5p and TPU7x slice names count TensorCores (two a chip): a v4-8 is 4 chips. v5e and v6e names count chips.
    cores_per_chip: int
    # Devices a run sees on one chip: TPU7x's two TensorCores are two devices (the figures above are then per device);
    # v4's and v5p's act as one (megacore).
    devices_per_chip: int = 1
    # Why the TPU compiler here cannot answer for this generation (plan.py --compile, --rehearse), where it cannot.
    no_compiler: str | None = None


TPU7X_NO_COMPILER = ("libtpu 0.0.21, the release torch_xla 2.9 pins, refuses TPU7x topologies ('Invalid TPU external "
                     "name'); TPU7x needs libtpu 0.0.31 or later with jax 0.8.1 or later, which torch_xla 2.9's jax "
                     "0.7 cannot load beside it")
CHIPS = {
    "v4": Chip("v4", 32 * GIB, int(30.75 * GIB), 275e12, 1200e9, 3.22, "us-central2", "v4", "megacore", True, 2),
    "v5e": Chip("v5e", 16 * GIB, int(15.75 * GIB), 197e12, 819e9, 1.20, "us-central1", "v5e", "default", False, 1),
    "v5p": Chip("v5p", 95 * GIB, 95 * GIB, 459e12, 2765e9, 4.20, "us-central1", "v5", "megacore", True, 2),
    "v6e": Chip("v6e", 32 * GIB, int(31.25 * GIB), 918e12, 1640e9, 2.70, "us-central1", "v6e", "default", False, 1),
    "tpu7x": Chip("tpu7x", 96 * GIB, 96 * GIB, 2307e12 / 2, 7380e9 / 2, None, "no published price", "tpu7x",
                  "default", True, 2, devices_per_chip=2, no_compiler=TPU7X_NO_COMPILER),
}
ALIASES = {"v5litepod": "v5e"}
# The slices each generation is sold in, by chips, and their shape as jax names it (MaxText's table). A single v4 or
# v5p chip is not sold; a single TPU7x chip is (tpu7x-2, its two devices).
SHAPES = {
    False: {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"},
    True: {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8"},
}
SINGLE_CHIP = {"v5e", "v6e", "tpu7x"}


def shapes(chip: Chip) -> dict:
    three = SHAPES[chip.three_dimensional]
    return {1: "1x1x1" if chip.three_dimensional else "1x1", **three} if chip.generation in SINGLE_CHIP else three


@dataclass(frozen=True)
class Target:
    name: str
    chip: Chip
    chips: int

    @property
    def devices(self) -> int:
        """The devices a run spreads over: a replica each in the data layout, a shard each under fsdp."""
        return self.chips * self.chip.devices_per_chip

    @property
    def chips_per_host(self) -> int:
        """As Google sells the slice: one host up to 8 v5e or v6e chips, else hosts of 4 (of 1 for a single chip)."""
        if self.chips == 1:
            return 1
        return 8 if self.chips == 8 and not self.chip.three_dimensional else 4

    def topology(self) -> tuple[str, tuple]:
        """(jax's topology name, chips per host bounds) of the program a chip runs: the slice's, its hosts as Google
        sells them, in both layouts, as the JAX step runs them (one process drives a host's chips; the data layout's
        weights whole on each, parallel/data_spmd.py)."""
        bounds = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 4, 1)}[self.chips_per_host]
        return f"{self.chip.topology_prefix}:{shapes(self.chip)[self.chips]}", bounds


class UnknownTarget(UserError, ValueError):
    pass


def known() -> list[str]:
    return [f"{chip.generation}-{count * chip.cores_per_chip}" for chip in CHIPS.values() for count in shapes(chip)]


def parse(names: str) -> list[Target]:
    """'v5e-8,v6e-4' -> Targets; an unknown name raises UnknownTarget listing the known ones."""
    targets = []
    for name in (part.strip().lower() for part in names.split(",") if part.strip()):
        match = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
        generation = ALIASES.get(match.group(1), match.group(1)) if match else None
        chip = CHIPS.get(generation)
        if chip is None or int(match.group(2)) % chip.cores_per_chip or \
                int(match.group(2)) // chip.cores_per_chip not in shapes(chip):
            raise UnknownTarget(f"tpu={name!r}: not a TPU slice this plan knows; known: {', '.join(known())}")
        targets.append(Target(f"{chip.generation}-{match.group(2)}", chip, int(match.group(2)) // chip.cores_per_chip))
    if not targets:
        raise UnknownTarget(f"tpu: name at least one slice, e.g. v5e-8; known: {', '.join(known())}")
    return targets
