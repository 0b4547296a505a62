"""The example formats a file or data set may hold, recognised from its columns, and the checks of their rows.

A causal LM also trains on instruction data: a `text` column, `prompt` and `completion` columns, or a `messages`
column (chat turns, JSON lines only); the causal LM's tasks.instructions turns each format into tokens and labels.
"""

from collections.abc import Callable
from dataclasses import dataclass

import datasets
import pyarrow as pa
import pyarrow.compute as pc


class DataProblem(ValueError):
    """A data file that cannot be trained on; the message names the file, line and problem."""


# The causal LM's example formats (tasks/instructions.py): the columns each one reads, checked as text here.
TEXT, PROMPT_COMPLETION, MESSAGES = "text", "prompt-completion", "messages"
FORMATS_ALLOWED = "a 'text' column, 'prompt' and 'completion' columns, or a 'messages' column (chat)"


@dataclass
class TextData:
    train: datasets.Dataset
    eval: datasets.Dataset
    text_column: str
    text_pair_column: str | None
    source: str
    format: str = TEXT  # TEXT, PROMPT_COMPLETION or MESSAGES; only a causal LM asks for the latter two


@dataclass(frozen=True)
class TaskChecks:
    """What a task asks of its examples beyond text in its text columns; each check returns a problem, or None."""

    row: Callable[[dict], str | None]  # one row of a local file, as written (the file and line are added here)
    split: Callable[[datasets.Dataset], str | None]  # one split of a hub data set (its name is added here)


def no_column(name: str, columns) -> str:
    """A missing column, said the same way for a file's row and a hub split (and by the task's checks)."""
    return f"no column {name!r} (columns: {', '.join(map(str, columns))})"


def example_format(columns, text_column: str | None) -> str | None:
    """The format that `columns` hold, or None: a --text_column given wins, then messages, prompt + completion, text."""
    if text_column:
        return TEXT
    if "messages" in columns:
        return MESSAGES
    if "prompt" in columns and "completion" in columns:
        return PROMPT_COMPLETION
    return TEXT if "text" in columns else None


def format_columns(data_format: str, text_column: str | None) -> list[str]:
    """The columns checked as text; `messages` holds turns, checked by `messages_problem` instead."""
    return {TEXT: [text_column or "text"], PROMPT_COMPLETION: ["prompt", "completion"], MESSAGES: []}[data_format]


def messages_problem(row: dict) -> str | None:
    """What is wrong with a row's chat turns (a list of {role, content} with an assistant turn), or None."""
    if "messages" not in row:
        return no_column("messages", row)
    messages = row["messages"]
    if isinstance(messages, str):
        return "column 'messages' holds text, not a list of turns: chat data needs a JSON lines file"
    if not isinstance(messages, list) or not messages:
        return 'column \'messages\' must be a non-empty list of {"role": ..., "content": ...} objects'
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)):
            return f"column 'messages' turn {index}: must be an object with text 'role' and 'content', not {str(message)[:60]}"
    if not any(message["role"] == "assistant" for message in messages):
        roles = ", ".join(dict.fromkeys(message["role"] for message in messages))
        return f"column 'messages': no 'assistant' turn to train on (roles: {roles})"
    return None


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


def main_column(data_format: str, text_column: str | None) -> str:
    """The column TextData names for a format: the text's, or the one an instruction example starts from."""
    return {TEXT: text_column or "text", PROMPT_COMPLETION: "prompt", MESSAGES: "messages"}[data_format]


def row_texts(row: dict, text_column: str | None) -> list[str]:
    """The text a row holds in its format, as written: what the demo's tokenizer builds its vocabulary from."""
    data_format = example_format(row, text_column)
    if data_format == MESSAGES and isinstance(row["messages"], list):
        values = [turn.get(key) for turn in row["messages"] if isinstance(turn, dict) for key in ("role", "content")]
    elif data_format == PROMPT_COMPLETION:
        values = [row["prompt"], row["completion"]]
    else:
        values = [row.get(text_column or "text")]
    return [value for value in values if isinstance(value, str)]
