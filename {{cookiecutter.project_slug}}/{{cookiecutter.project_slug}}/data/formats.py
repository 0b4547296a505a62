"""What the examples of every task are held in, and the checks of their rows that every task shares."""

from collections.abc import Callable
from dataclasses import dataclass

import datasets
import pyarrow as pa
import pyarrow.compute as pc

from ..config.errors import UserError


class DataProblem(UserError, ValueError):
    """A data file that cannot be trained on; the message names the file, line and problem."""


TEXT = "text"  # the examples' format: one text column (and a classifier's pair and label)


@dataclass
class TextData:
    train: datasets.Dataset
    eval: datasets.Dataset
    text_column: str
    text_pair_column: str | None
    source: str
    format: str = TEXT  # a causal LM also reads instruction formats (recognised from the columns)


@dataclass(frozen=True)
class TaskChecks:
    """What a task asks of its examples beyond text in its text columns; each check returns a problem, or None."""

    row: Callable[[dict], str | None]  # one row of a local file, as written (the file and line are added here)
    split: Callable[[datasets.Dataset], str | None]  # one split of a hub data set (its name is added here)


def no_column(name: str, columns) -> str:
    """A missing column, said the same way for a file's row and a hub split (and by the task's checks)."""
    return f"no column {name!r} (columns: {', '.join(map(str, columns))})"


def first_without_text(rows: datasets.Dataset, column: str, start: int, count: int) -> tuple[int, str] | None:
    """The first of `count` rows from `start` with no text to train on in `column` (its index), and what it holds."""
    values = rows.with_format("arrow", columns=[column])[start:start + count][column]
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        # Missing, empty or only white space, computed in Arrow without a Python string per row;
        # utf8_is_space's white space is exactly str.strip's (checked over every code point).
        bad = pc.fill_null(pc.or_(pc.equal(pc.binary_length(values), 0), pc.utf8_is_space(values)), True)
        index = pc.index(bad, True).as_py()
        value = values[index].as_py() if index >= 0 else None
    else:  # numbers, or JSON values of mixed types (stored as JSON text): the Python values training would read
        values = rows[start:start + count][column]
        index = next((i for i, value in enumerate(values) if not (isinstance(value, str) and value.strip())), -1)
        value = values[index]
    if index < 0:
        return None
    if value is None:
        return start + index, "a missing value (the loader reads NA, null, None, NaN and empty cells as missing)"
    return start + index, "only white space" if isinstance(value, str) else f"{value!r}, not text"
