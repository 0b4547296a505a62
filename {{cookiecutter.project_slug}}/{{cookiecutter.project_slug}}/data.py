"""Where examples come from: the shipped offline demo, local files, or a hub data set.

Local files are checked row by row before any training starts, so that a bad file
fails with its name, its line and the problem instead of deep inside a data loader.
"""

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

import datasets

from .config import DEFAULT_DATASET, DEFAULT_MODEL, DEMO_DATA_DIR, TrainConfig

DEMO_FILES = {"train": DEMO_DATA_DIR / "train.csv", "eval": DEMO_DATA_DIR / "eval.csv"}
DEMO_VOCAB_SIZE = 800


class DataProblem(ValueError):
    """A data file that cannot be trained on; the message names the file, line and problem."""


@dataclass
class TextData:
    train: datasets.Dataset
    eval: datasets.Dataset
    text_column: str
    text_pair_column: str | None
    label_column: str | None  # None: texts only (a language model's data)
    source: str


def hub_reachable(model_name_or_path: str) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        import huggingface_hub

        huggingface_hub.model_info(model_name_or_path, timeout=5)
    except Exception:
        return False
    return True


def wants_demo(config: TrainConfig) -> bool:
    """The demo runs when asked for, or when nothing was chosen and the hub is out of reach."""
    if config.demo is not None:
        return config.demo
    chose_something = (
        config.train_file is not None
        or config.dataset != DEFAULT_DATASET
        or config.model_name_or_path != DEFAULT_MODEL
        or Path(config.model_name_or_path).is_dir()
    )
    if chose_something or hub_reachable(config.model_name_or_path):
        return False
    print(f"The hub cannot be reached: training the offline demo instead of {config.model_name_or_path} on "
          f"{config.dataset} (pass --demo false to insist).")
    return True


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".json", ".jsonl"):
        return "json"
    raise DataProblem(f"{path}: unsupported file type {suffix!r}; use .csv, .json or .jsonl (JSON lines)")


def _rows(path: Path):
    """Yield (line number, row dict) from a CSV or JSON lines file."""
    if _format(path) == "csv":
        with path.open(newline="", encoding="utf-8") as handle:
            # strict: a stray or unclosed quote is an error, not text that swallows the lines after it.
            reader = csv.DictReader(handle, strict=True)
            try:
                for row in reader:
                    # DictReader files extra fields under None and fills missing ones with None.
                    if None in row or None in row.values():
                        named = sum(value is not None for key, value in row.items() if key is not None)
                        fields = named + len(row.get(None) or [])
                        raise DataProblem(
                            f"{path} line {reader.line_num}: {fields} field(s) where the header has "
                            f"{len(reader.fieldnames)} (a missing field, or a comma in unquoted text?)"
                        )
                    yield reader.line_num, row
            except csv.Error as error:
                # line_num counts the lines of complete records: the bad record starts on the next one.
                raise DataProblem(f"{path} line {reader.line_num + 1}: not valid CSV ({error})") from None
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


def check_file(path, columns: list[str], label_column: str | None, num_labels: int) -> int:
    """Refuse a file that cannot be trained on; return its number of examples."""
    return len(read_checked(path, columns, label_column, num_labels))


def read_checked(path, columns: list[str], label_column: str | None, num_labels: int) -> datasets.Dataset:
    """The file as `datasets` loads it, refused with its name, line and problem if it cannot be trained on.

    Two passes: the rows as written (structure, labels, line numbers), then the loaded columns, because
    `datasets`' CSV reader turns `NA`, `null`, `None` or an empty cell into a missing value, which would
    pass a check of the text as written and then fail inside the tokenizer.
    """
    path = Path(path)
    lines = _checked_lines(path, columns, label_column, num_labels)
    loaded = datasets.load_dataset(_format(path), data_files=str(path), split="train")
    for column in columns:
        for index, value in enumerate(loaded[column]):
            if isinstance(value, str) and value.strip():
                continue
            if value is None:
                found = "a missing value (the loader reads NA, null, None, NaN and empty cells as missing)"
            else:
                found = "only white space" if isinstance(value, str) else f"{value!r}, not text"
            raise DataProblem(f"{path} line {lines[index]}: column {column!r} has no text to train on: {found}")
    return loaded


def _checked_lines(path: Path, columns: list[str], label_column: str | None, num_labels: int) -> list[int]:
    """The line where each example starts, after checking its columns and label (if any) as written."""
    if not path.is_file():
        raise DataProblem(f"{path}: file not found")
    lines = []
    try:
        for line, row in _rows(path):
            missing = [name for name in [*columns, *([label_column] if label_column else [])] if name not in row]
            if missing:
                raise DataProblem(
                    f"{path} line {line}: no column {missing[0]!r} (columns: {', '.join(map(str, row))})"
                )
            if label_column is None:
                lines.append(line)
                continue
            label = row[label_column]
            try:
                valid = float(label) == int(float(label)) and 0 <= int(float(label)) < num_labels
            except (TypeError, ValueError):
                valid = False
            if not valid:
                raise DataProblem(
                    f"{path} line {line}: label {label!r} is not a whole number in 0..{num_labels - 1} (num_labels={num_labels})"
                )
            lines.append(line)
    except UnicodeDecodeError:
        raise DataProblem(f"{path}: not UTF-8 text") from None
    if not lines:
        raise DataProblem(f"{path}: no examples (empty file or header only)")
    return lines


def _load_files(files: dict, config: TrainConfig, text_column: str, source: str, labelled: bool) -> TextData:
    columns = [text_column] + ([config.text_pair_column] if config.text_pair_column else [])
    label_column = config.label_column if labelled else None
    # One load per file, so that a CSV train file can go with a JSON lines eval file.
    loaded = {split: read_checked(path, columns, label_column, config.num_labels) for split, path in files.items()}
    return TextData(loaded["train"], loaded["eval"], text_column, config.text_pair_column, label_column, source)


def uses_files(config: TrainConfig) -> bool:
    return bool(config.train_file or config.eval_file or config.dataset == "files")


def load_text_data(config: TrainConfig, demo: bool, labelled: bool = True) -> TextData:
    """The train and eval texts (with their labels, when `labelled`): the user's files, the demo's, or the hub's."""
    # The user's own files win over the shipped demo data: --demo with --train_file trains the demo model on them.
    if uses_files(config):
        if not (config.train_file and config.eval_file):
            raise DataProblem("train_file and eval_file: give both local files (CSV or JSON lines)")
        files = {"train": config.train_file, "eval": config.eval_file}
        return _load_files(files, config, config.text_column or "text", "files", labelled)
    if demo:
        return _load_files(DEMO_FILES, config, config.text_column or "text", "demo", labelled)
    loaded = load_hub_dataset(config.dataset)
    if "train" not in loaded:
        raise DataProblem(f"dataset={config.dataset!r}: no train split (splits: {', '.join(loaded)})")
    eval_split = "validation" if "validation" in loaded else "test"
    if eval_split not in loaded:
        raise DataProblem(f"dataset={config.dataset!r}: no validation or test split to evaluate on (splits: {', '.join(loaded)})")
    if labelled:
        for split in ("train", eval_split):
            check_hub_labels(loaded[split], f"dataset={config.dataset!r} split {split!r}", config.label_column, config.num_labels)
    text_column = config.text_column or ("sentence1" if "sentence1" in loaded["train"].column_names else "text")
    pair = config.text_pair_column or ("sentence2" if "sentence2" in loaded["train"].column_names else None)
    label_column = config.label_column if labelled else None
    return TextData(loaded["train"], loaded[eval_split], text_column, pair, label_column, config.dataset)


def load_hub_dataset(dataset: str):
    """`glue/mrpc` is the hub's glue data set with its mrpc configuration; a local folder laid out like
    a hub data set (train.csv, validation.csv, ...) loads the same way."""
    if Path(dataset).is_dir():
        return datasets.load_dataset(dataset)
    name, _, subset = dataset.partition("/")
    return datasets.load_dataset(name, subset or None)


def check_hub_labels(split, where: str, label_column: str, num_labels: int) -> None:
    """Refuse a split whose labels cannot be evaluated: GLUE's test splits, for one, carry -1 everywhere."""
    if label_column not in split.column_names:
        raise DataProblem(f"{where}: no column {label_column!r} (columns: {', '.join(split.column_names)})")
    labels = split[label_column]
    bad = [label for label in labels if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < num_labels]
    if not bad:
        return
    if all(label == -1 for label in bad):
        raise DataProblem(
            f"{where}: {len(bad)} of {len(labels)} rows have no label (-1, as in GLUE's test splits): evaluate on a "
            "split with labels, or use --dataset files with your own --eval_file"
        )
    raise DataProblem(f"{where}: label {bad[0]!r} is not a whole number in 0..{num_labels - 1} (num_labels={num_labels})")


def train_demo_tokenizer(texts):
    """A WordPiece vocabulary built from the demo's own texts (no download), the same in every process.

    Its words by frequency (ties alphabetical), plus single characters as the pieces of unseen
    words. Not tokenizers' WordPieceTrainer: it breaks ties between equally frequent merges in
    hash order, so each process got another vocabulary, and a resumed run (which rebuilds this
    tokenizer) read its checkpoint's embeddings through the wrong token ids.
    """
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = Counter(
        word for text in texts for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    )
    characters = sorted({char for word in counts for char in word})
    words = sorted(counts, key=lambda word: (-counts[word], word))
    pieces = list(dict.fromkeys([*specials, *characters, *("##" + char for char in characters), *words]))
    vocab = {piece: index for index, piece in enumerate(pieces[:DEMO_VOCAB_SIZE])}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )


def load_tokenizer(config: TrainConfig, demo: bool):
    if demo:
        # Built from the training texts it will read: the shipped demo's, or the user's own file.
        path = Path(config.train_file) if uses_files(config) and config.train_file else DEMO_FILES["train"]
        if not path.is_file():
            raise DataProblem(f"{path}: file not found")
        column = config.text_column or "text"
        texts = [row[column] for _, row in _rows(path) if isinstance(row.get(column), str)]
        return train_demo_tokenizer(texts)
    from transformers import AutoTokenizer

    from .modeling import from_hub_or_folder

    return from_hub_or_folder(AutoTokenizer.from_pretrained, config.model_name_or_path)
