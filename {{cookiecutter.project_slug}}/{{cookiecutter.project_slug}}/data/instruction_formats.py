"""A causal LM's example formats, recognised from the columns: a `text` column, `prompt` and `completion` columns, or a
`messages` column (chat turns, JSON lines only); their checks, and the data loaded in them.

tasks/instructions.py turns each format into tokens and labels; data/streaming.py reads them as a stream.
"""

from pathlib import Path

from ..config.groups import DataOptions
from .formats import TEXT, DataProblem, TaskChecks, TextData, no_column
from .sources import chosen_files, hub_splits, hub_text_data, load_files, rows

PROMPT_COMPLETION, MESSAGES = "prompt-completion", "messages"
FORMATS_ALLOWED = "a 'text' column, 'prompt' and 'completion' columns, or a 'messages' column (chat)"


def load_data(options: DataOptions, demo: bool) -> TextData:
    """The train and eval examples in the one format both hold, each row checked: the user's files, the demo's, or
    the hub's (whose instruction rows are not checked here)."""
    found = chosen_files(options, demo)
    if found is None:
        train, evaluation = hub_splits(options)
        data_format = example_format(train.column_names, options.text_column)
        if data_format in (PROMPT_COMPLETION, MESSAGES):
            return TextData(train, evaluation, main_column(data_format, None), None, options.dataset, data_format)
        return hub_text_data(options, train, evaluation)
    files, source = found
    data_format = files_format(files, options.text_column)
    checks = TaskChecks(row=messages_problem, split=lambda split: None) if data_format == MESSAGES else None
    loaded = load_files(files, format_columns(data_format, options.text_column), checks)
    return TextData(loaded["train"], loaded["eval"], main_column(data_format, options.text_column), None, source,
                    data_format)


def files_format(files: dict, text_column: str | None) -> str:
    """The one format of the train and eval files (split -> path); refused when they differ."""
    found = {split: file_format(path, text_column) for split, path in files.items()}
    if found["train"] != found["eval"]:
        raise DataProblem(f"{files['eval']}: {found['eval']} examples, but {files['train']} holds {found['train']} "
                          f"examples; give both files one format ({FORMATS_ALLOWED})")
    return found["train"]


def file_format(path, text_column: str | None) -> str:
    """The format of a local file, from its first row's columns; refused, naming what is allowed, if none."""
    path = Path(path)
    if not path.is_file():
        raise DataProblem(f"{path}: file not found")
    try:
        first = next(rows(path), None)
    except UnicodeDecodeError:
        raise DataProblem(f"{path}: not UTF-8 text") from None
    if first is None:
        raise DataProblem(f"{path}: no examples (empty file or header only)")
    line, row = first
    found = example_format(row, text_column)
    if found is None:
        raise DataProblem(f"{path} line {line}: {no_column('text', row)}; a causal LM trains on {FORMATS_ALLOWED}")
    return found


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
