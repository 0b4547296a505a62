"""The recompilation grid: eval batch size x last batch x padding.

Sizes are relative to the train batch size (equal, twice, half) plus one that does
not divide the eval set, so that a ragged last batch really happens. The quick
profile varies one factor at a time away from the project's default
(eval size = train size, padded last batch, fixed padding), which keeps every value
of every factor in the run with 8 cells instead of 36.
"""

from dataclasses import dataclass
from itertools import product

from {{ cookiecutter.project_slug }}.config import PADDING_MODES
from {{ cookiecutter.project_slug }}.data.batching import LAST_BATCH_POLICIES

SIZE_LABELS = ("train", "2x-train", "half-train", "non-divisor")
DEFAULT = ("train", "pad", "fixed")


@dataclass(frozen=True)
class Cell:
    size_label: str
    eval_batch_size: int
    last_batch: str
    padding: str

    @property
    def id(self) -> str:
        return f"eval{self.eval_batch_size}-{self.size_label}-{self.last_batch}-{self.padding}"

    @property
    def is_default(self) -> bool:
        return (self.size_label, self.last_batch, self.padding) == DEFAULT


def eval_sizes(train_batch_size: int, eval_set_size: int) -> dict[str, int]:
    """The four eval batch sizes; the last is the first size from 1.5x train up that leaves a ragged batch."""
    sizes = {"train": train_batch_size, "2x-train": 2 * train_batch_size, "half-train": max(1, train_batch_size // 2)}
    candidate = max(2, train_batch_size * 3 // 2)
    while eval_set_size % candidate == 0 or candidate in sizes.values():
        candidate += 1
    sizes["non-divisor"] = candidate
    return sizes


def build(train_batch_size: int, eval_set_size: int, full: bool) -> list[Cell]:
    sizes = eval_sizes(train_batch_size, eval_set_size)
    if full:
        combos = list(product(SIZE_LABELS, LAST_BATCH_POLICIES, PADDING_MODES))
    else:
        combos = [DEFAULT]
        combos += [(label, DEFAULT[1], DEFAULT[2]) for label in SIZE_LABELS if label != DEFAULT[0]]
        combos += [(DEFAULT[0], last, DEFAULT[2]) for last in LAST_BATCH_POLICIES if last != DEFAULT[1]]
        combos += [(DEFAULT[0], DEFAULT[1], padding) for padding in PADDING_MODES if padding != DEFAULT[2]]
    return [Cell(label, sizes[label], last, padding) for label, last, padding in combos]
