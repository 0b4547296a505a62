"""Where examples come from: the shipped offline demo, local files, or a hub data set.

Local files are checked row by row before any training starts, so that a bad file
fails with its name, its line and the problem instead of deep inside a data loader. The text columns are
checked here; what else a task reads (a classifier's labels) its module checks, through `TaskChecks`.
"""

import csv
import json
from pathlib import Path

import datasets

from ..config import DEFAULT_DATASET, DEFAULT_MODEL, DEMO_DATA_DIR
from ..config.groups import DataOptions, ModelOptions
from .formats import DataProblem, TaskChecks, TextData, first_without_text, no_column
from .hub import hub_reachable, load_hub_dataset

# Text of the loaded columns checked at a time, as rows of the file's mean size: Arrow's utf8_is_space allocates about
# as much again as the text it reads (10 000 rows of whole source files made 157 MB).
CHECK_BYTES = 16 * 2**20
DEMO_FILES = {"train": DEMO_DATA_DIR / "train.csv", "eval": DEMO_DATA_DIR / "eval.csv"}


def wants_demo(options: DataOptions, model: ModelOptions) -> bool:
    """The demo runs when asked for, or when nothing was chosen and the hub is out of reach (its data and its model)."""
    if options.demo is not None:
        return options.demo
    chose_something = (
        options.train_file is not None
        or options.dataset != DEFAULT_DATASET
        or model.model_name_or_path != DEFAULT_MODEL
        or Path(model.model_name_or_path).is_dir()
    )
    if chose_something or hub_reachable(model.model_name_or_path):
        return False
    print(f"The hub cannot be reached: training the offline demo instead of {model.model_name_or_path} on "
          f"{options.dataset} (pass --demo false to insist).")
    return True


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".json", ".jsonl"):
        return "json"
    raise DataProblem(f"{path}: unsupported file type {suffix!r}; use .csv, .json or .jsonl (JSON lines)")


def rows(path: Path):
    """Yield (line number, row dict) from a CSV or JSON lines file."""
    if _format(path) == "csv":
        with path.open(newline="", encoding="utf-8") as handle:
            # strict: a stray or unclosed quote is an error, not text that swallows the lines after it.
            # csv.reader, not DictReader: it reads a 200 MB file in about half the time.
            # complete: the lines of the records read whole; a bad record starts on the next one.
            reader, complete = csv.reader(handle, strict=True), 0
            try:
                header = next(reader, [])
                complete = reader.line_num
                for fields in reader:
                    complete = reader.line_num
                    if not fields:  # a blank line: skipped, as the loader skips it
                        continue
                    if len(fields) != len(header):
                        raise DataProblem(
                            f"{path} line {reader.line_num}: {len(fields)} field(s) where the header has "
                            f"{len(header)} (a missing field, or a comma in unquoted text?)"
                        )
                    yield reader.line_num, dict(zip(header, fields, strict=True))
            except csv.Error as error:
                raise DataProblem(f"{path} line {complete + 1}: not valid CSV ({error})") from None
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataProblem(f"{path} line {number}: not valid JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise DataProblem(f"{path} line {number}: expected a JSON object per line")
            yield number, row


def check_file(path, columns: list[str], checks: TaskChecks | None = None) -> int:
    """Refuse a file that cannot be trained on; return its number of examples."""
    return len(read_checked(path, columns, checks))


def read_checked(path, columns: list[str], checks: TaskChecks | None = None) -> datasets.Dataset:
    """The file as `datasets` loads it, refused with its name, line and problem if it cannot be trained on.

    Two passes: the rows as written (structure, the task's checks), then the loaded columns, because
    `datasets`' CSV reader turns `NA`, `null`, `None` or an empty cell into a missing value, which would
    pass a check of the text as written and then fail inside the tokenizer. Both stream: the rows one at a
    time, the columns in Arrow batches; no list of a file's rows, lines or values is held.
    """
    path = Path(path)
    _check_rows(path, columns, checks)
    loaded = datasets.load_dataset(_format(path), data_files=str(path), split="train")
    batch = max(1, CHECK_BYTES * len(loaded) // max(path.stat().st_size, 1))
    for column in columns:  # column by column, as the rows are checked for missing columns
        for start in range(0, len(loaded), batch):
            if failed := first_without_text(loaded, column, start, batch):
                line = _line_of(path, failed[0])
                raise DataProblem(f"{path} line {line}: column {column!r} has no text to train on: {failed[1]}")
    return loaded


def _line_of(path: Path, index: int) -> int | str:
    """The line of the index-th example, found again when one fails rather than kept for every row
    ("?" only should the loader count more rows than `rows` does)."""
    return next((line for number, (line, _) in enumerate(rows(path)) if number == index), "?")


def _check_rows(path: Path, columns: list[str], checks: TaskChecks | None) -> None:
    """Check each example's columns and the task's checks as written, one row at a time."""
    if not path.is_file():
        raise DataProblem(f"{path}: file not found")
    examples = 0
    try:
        for line, row in rows(path):
            missing = [name for name in columns if name not in row]
            problem = no_column(missing[0], row) if missing else (checks.row(row) if checks else None)
            if problem:
                raise DataProblem(f"{path} line {line}: {problem}")
            examples += 1
    except UnicodeDecodeError:
        raise DataProblem(f"{path}: not UTF-8 text") from None
    if not examples:
        raise DataProblem(f"{path}: no examples (empty file or header only)")


def load_files(files: dict, columns: list[str], checks: TaskChecks | None) -> dict[str, datasets.Dataset]:
    """Each split's file (`files`: split -> path) loaded, refused unless its `columns` hold text and `checks` pass."""
    # One load per file, so that a CSV train file can go with a JSON lines eval file.
    return {split: read_checked(path, columns, checks) for split, path in files.items()}


def uses_files(options: DataOptions) -> bool:
    return bool(options.train_file or options.eval_file or options.dataset == "files")


def chosen_files(options: DataOptions, demo: bool) -> tuple[dict, str] | None:
    """(split -> path, source) of the user's files or the demo's; None for the hub. The user's own files win over the
    shipped demo data: --demo with --train_file trains the demo model on them."""
    if uses_files(options):
        if not (options.train_file and options.eval_file):
            raise DataProblem("train_file and eval_file: give both local files (CSV or JSON lines)")
        return {"train": options.train_file, "eval": options.eval_file}, "files"
    return (DEMO_FILES, "demo") if demo else None


def hub_splits(options: DataOptions, checks: TaskChecks | None = None) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(train, eval) splits of the hub data set --dataset, refused unless `checks` (the task's) pass on both."""
    loaded = load_hub_dataset(options.dataset)
    if "train" not in loaded:
        raise DataProblem(f"dataset={options.dataset!r}: no train split (splits: {', '.join(loaded)})")
    eval_split = "validation" if "validation" in loaded else "test"
    if eval_split not in loaded:
        raise DataProblem(f"dataset={options.dataset!r}: no validation or test split to evaluate on (splits: {', '.join(loaded)})")
    for split in ("train", eval_split) if checks else ():
        problem = checks.split(loaded[split])
        if problem:
            raise DataProblem(f"dataset={options.dataset!r} split {split!r}: {problem}")
    return loaded["train"], loaded[eval_split]


def hub_text_data(options: DataOptions, train, evaluation, pair_column: str | None = None) -> TextData:
    """A hub data set's text columns: --text_column, else `sentence1` (GLUE's pairs) or `text`, and its pair."""
    names = train.column_names
    text_column = options.text_column or ("sentence1" if "sentence1" in names else "text")
    pair = pair_column or ("sentence2" if "sentence2" in names else None)
    return TextData(train, evaluation, text_column, pair, options.dataset)


def load_text_data(
    options: DataOptions, demo: bool, pair_column: str | None = None, checks: TaskChecks | None = None,
) -> TextData:
    """The train and eval examples, refused unless `checks` (the task's) pass: the user's files, the demo's, or
    the hub's. `pair_column`: a second text column, checked like the first (a hub data set's sentence2 if unset)."""
    found = chosen_files(options, demo)
    if found is None:
        return hub_text_data(options, *hub_splits(options, checks), pair_column)
    files, source = found
    text_column = options.text_column or "text"
    loaded = load_files(files, [text_column] + ([pair_column] if pair_column else []), checks)
    return TextData(loaded["train"], loaded["eval"], text_column, pair_column, source)
