"""Local data files: a bad file is refused with its name, line and problem before training;
a good one trains through the real `from_pretrained` / `load_dataset` path.
"""

import csv
import json
import re

import pytest
from conftest import child_env, python_command, run
from huggingface_hub import ModelCard

from {{ cookiecutter.project_slug }}.data import sources
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES, DataProblem, check_file
from {{ cookiecutter.project_slug }}.tasks.text_classification import label_checks

COLUMNS = ["text"]
LABELS = label_checks("label", num_labels=2)
BAKED_MODEL = {{ cookiecutter.model_name_or_path | tojson }}
GOOD_ROWS = [("a fine film", 1), ("a dull film", 0), ("great acting", 1)]


def write_csv(path, rows, header=("text", "label")):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in rows))
    return path


BAD_FILES = {
    # name: (file name, content, expected message with {path})
    "missing": ("absent.csv", None, "{path}: file not found"),
    "empty": ("empty.csv", "", "{path}: no examples (empty file or header only)"),
    "header-only": ("header.csv", "text,label\n", "{path}: no examples (empty file or header only)"),
    "no-label-column": ("nolabel.csv", "text,score\nfine,1\n", "{path} line 2: no column 'label'"),
    "no-text-column": ("notext.jsonl", '{"sentence": "fine", "label": 1}\n', "{path} line 1: no column 'text'"),
    "label-too-large": ("big.csv", "text,label\nfine,1\nodd,2\n", "{path} line 3: label '2' is not a whole number in 0..1"),
    "label-negative": ("neg.jsonl", '{"text": "a", "label": 0}\n{"text": "b", "label": -1}\n',
                       "{path} line 2: label -1 is not a whole number in 0..1"),
    "label-not-a-number": ("word.csv", "text,label\nfine,positive\n", "{path} line 2: label 'positive' is not a whole"),
    "label-fraction": ("half.csv", "text,label\nfine,0.5\n", "{path} line 2: label '0.5' is not a whole"),
    "csv-stray-quote": ("stray.csv", 'text,label\nfine,1\n"quoted"twice,0\n', "{path} line 3: not valid CSV (',' expected after '\"')"),
    "csv-unclosed-quote": ("quote.csv", 'text,label\nfine,1\n"never closed,0\nmore,1\n',
                           "{path} line 3: not valid CSV (unexpected end of data)"),
    "csv-missing-field": ("short.csv", "text,label\nfine,1\nlonely\n", "{path} line 3: 1 field(s) where the header has 2"),
    "csv-stray-comma": ("comma.csv", "text,label\nfine,1\nhello, world,0\n", "{path} line 3: 3 field(s) where the header has 2"),
    "jsonl-broken": ("broken.jsonl", '{"text": "a", "label": 0}\n{"text": "b", "label": \n', "{path} line 2: not valid JSON"),
    "jsonl-not-object": ("list.jsonl", '["a", 0]\n', "{path} line 1: expected a JSON object per line"),
    "label-one-and-a-half": ("frac.jsonl", '{"text": "a", "label": 1.5}\n', "{path} line 1: label 1.5 is not a whole"),
    # What datasets' CSV reader turns into a missing value: accepted as written, refused as loaded.
    "text-NA": ("na.csv", "text,label\nfine,1\nNA,0\n", "{path} line 3: column 'text' has no text to train on: a missing value"),
    "text-null": ("null.csv", "text,label\nfine,1\nnull,0\n", "{path} line 3: column 'text' has no text to train on: a missing value"),
    "text-None": ("none.csv", "text,label\nfine,1\nfair,1\nNone,0\n", "{path} line 4: column 'text' has no text to train on: a missing value"),
    "text-empty": ("blank.csv", 'text,label\nfine,1\n"",0\n', "{path} line 3: column 'text' has no text to train on: a missing value"),
    "text-white-space": ("space.csv", 'text,label\nfine,1\n"   ",0\n', "{path} line 3: column 'text' has no text to train on: only white space"),
    "text-json-null": ("null.jsonl", '{"text": "a", "label": 0}\n\n{"text": null, "label": 1}\n',
                       "{path} line 3: column 'text' has no text to train on: a missing value"),
    "not-utf8": ("latin1.csv", "text,label\ncaf\xe9,1\n".encode("latin-1"), "{path}: not UTF-8 text"),
    "wrong-type": ("data.parquet", "x", "{path}: unsupported file type '.parquet'"),
}


def make_bad_file(folder, name):
    file_name, content, message = BAD_FILES[name]
    path = folder / file_name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    return path, message.format(path=path)


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_file_is_refused_with_file_line_and_problem(tmp_path, name):
    path, message = make_bad_file(tmp_path, name)
    with pytest.raises(DataProblem) as refused:
        check_file(path, COLUMNS, LABELS)
    assert str(refused.value).startswith(message), str(refused.value)


@pytest.mark.parametrize("name, content, message", [
    ("deep.csv", 'text,label\na,1\n\n"two\nlines",0\nb,1\nc,0\nNA,1\n', "line 8: column 'text' has no text to train on: a missing"),
    ("mixed.jsonl", '{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n{"text": 7}\n', "line 4: column 'text' has no text to train on: 7, not text"),
])
def test_loaded_columns_are_checked_in_batches_and_a_late_row_names_its_line(tmp_path, monkeypatch, name, content, message):
    """No list of lines is kept: a row past the first batch, after a blank line and a quoted line break, is found
    again in the file. (Mixed JSON types load as JSON text, checked as the decoded values.)"""
    monkeypatch.setattr(sources, "CHECK_BYTES", 1)  # batches of one row
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataProblem) as refused:
        check_file(path, COLUMNS)
    assert str(refused.value).startswith(f"{path} {message}"), str(refused.value)


def test_good_files_are_counted(tmp_path):
    assert check_file(write_csv(tmp_path / "ok.csv", GOOD_ROWS), COLUMNS, LABELS) == len(GOOD_ROWS)
    assert check_file(write_jsonl(tmp_path / "ok.jsonl", GOOD_ROWS), COLUMNS, LABELS) == len(GOOD_ROWS)
    assert check_file(DEMO_FILES["eval"], COLUMNS, LABELS) == 120


def test_text_pair_column_is_required_when_asked_for(tmp_path):
    path = write_csv(tmp_path / "pairs.csv", GOOD_ROWS)
    with pytest.raises(DataProblem, match=r"line 2: no column 'sentence2'"):
        check_file(path, ["text", "sentence2"], LABELS)


@pytest.mark.xla
def test_cli_refuses_bad_file_before_training(tmp_path):
    """One line on stderr, exit code 2, no traceback, and no checkpoint or report written."""
    bad, message = make_bad_file(tmp_path, "label-too-large")
    good = write_csv(tmp_path / "eval.csv", GOOD_ROWS)
    output = tmp_path / "outputs"
    result = run(
        python_command("--output_dir", str(output), "--train_file", str(bad), "--eval_file", str(good),
                       "--compilation_cache", "false"),
        check=False,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {message} (num_labels=2)"], result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert not (output / "checkpoints").exists() and not (output / "report.json").exists()


@pytest.mark.xla
def demo_rows():
    with DEMO_FILES["train"].open(newline="", encoding="utf-8") as handle:
        return [(row["text"], int(row["label"])) for row in csv.DictReader(handle)]


@pytest.mark.slow
@pytest.mark.layout("data")
def test_trains_from_saved_model_and_local_files(tmp_path, local_model):
    """The real path, offline: from_pretrained on a save_pretrained folder, load_dataset on local files
    (a CSV train file and a JSON lines eval file)."""
    model_dir = local_model
    assert (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()
    rows = demo_rows()
    train = write_csv(tmp_path / "train.csv", rows[:64])
    evaluation = write_jsonl(tmp_path / "eval.jsonl", rows[64:101])  # 37 rows: a ragged last batch
    output = tmp_path / "outputs"
    result = run(python_command(
        "--output_dir", str(output), "--model_name_or_path", str(model_dir), "--train_file", str(train),
        "--eval_file", str(evaluation), "--max_seq_length", "64", "--num_epochs", "1", "--mixed_precision", "no",
        "--checkpoint", "false",
    ))
    report = json.loads((output / "report.json").read_text())
    assert "offline demo" not in result.stdout
    assert report["data"] == "files"
    assert report["train_examples"] == 64
    assert report["eval_examples_counted"] == 37
    assert report["config"]["model_name_or_path"] == str(model_dir)
    assert re.fullmatch(r"xla:\w+", report["device"])


def test_own_files_without_the_hub_or_a_local_model_end_in_one_line(tmp_path):
    """HF_HUB_OFFLINE=1 (or no network) and a hub model id: one line naming the model and the fix."""
    rows = demo_rows()
    files = ["--train_file", str(write_csv(tmp_path / "t.csv", rows[:32])),
             "--eval_file", str(write_csv(tmp_path / "e.csv", rows[32:48]))]
    result = run(python_command("--output_dir", str(tmp_path / "outputs"), "--dataset", "files", *files, xla=False),
                 env=child_env(xla=False), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: model_name_or_path={BAKED_MODEL!r} cannot be loaded (")
    assert error.endswith("Pass --model_name_or_path with a folder written by save_pretrained, "
                          "or --demo to train the demo model on your files")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_demo_flag_with_own_files_trains_the_demo_model_on_the_files(tmp_path):
    """--demo with --train_file: the files are trained on (never silently replaced by the shipped data)."""
    rows = demo_rows()
    train, evaluation = write_csv(tmp_path / "t.csv", rows[:64]), write_jsonl(tmp_path / "e.jsonl", rows[64:101])
    output = tmp_path / "outputs"
    run(python_command("--output_dir", str(output), "--demo", "--train_file", str(train), "--eval_file", str(evaluation),
                       "--max_seq_length", "64", "--num_epochs", "1", "--mixed_precision", "no", "--checkpoint", "false"))
    report = json.loads((output / "report.json").read_text())
    assert (report["data"], report["train_examples"], report["eval_examples_counted"]) == ("files", 64, 37)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_three_classes_from_named_label_and_text_pair_columns_train(tmp_path):
    """The README's multi-class classifier: --num_labels 3 with --label_column and --text_pair_column, end to end."""
    rows = [(text, text[::-1], index % 3) for index, (text, _) in enumerate(demo_rows()[:101])]
    header = ("premise", "hypothesis", "category")
    train, evaluation = write_csv(tmp_path / "t.csv", rows[:64], header), write_csv(tmp_path / "e.csv", rows[64:], header)
    output = tmp_path / "outputs"
    run(python_command("--output_dir", str(output), "--demo", "--train_file", str(train), "--eval_file", str(evaluation),
                       "--text_column", "premise", "--text_pair_column", "hypothesis", "--label_column", "category",
                       "--num_labels", "3", "--max_seq_length", "64", "--num_epochs", "1", "--mixed_precision", "no",
                       "--checkpoint", "false"))
    report = json.loads((output / "report.json").read_text())
    assert (report["train_examples"], report["eval_examples_counted"]) == (64, 37)
    exported = json.loads((output / "model" / "config.json").read_text())
    assert len(exported["id2label"]) == 3  # a 3-way head, trained on the category column
    # A 3 x 3 confusion matrix whose rows hold the eval file's rows of each category, each once.
    confusion = report["eval_confusion_matrix"]
    assert [sum(row) for row in confusion] == [sum(category == label for *_, category in rows[64:]) for label in range(3)]
    from sklearn.metrics import f1_score  # the macro-F1 of the predictions that matrix counts

    pairs = [(truth, guess) for truth in range(3) for guess in range(3) for _ in range(confusion[truth][guess])]
    truths, guesses = zip(*pairs, strict=True)
    assert report["eval_macro_f1"] == f1_score(truths, guesses, labels=[0, 1, 2], average="macro", zero_division=0.0)
    assert (output / "confusion.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def hub_layout(folder, splits: dict):
    """A local folder laid out as a hub data set (a CSV per split, GLUE's sentence pair columns)."""
    folder.mkdir()
    for split, rows in splits.items():
        write_csv(folder / f"{split}.csv", [(text, text[::-1], label) for text, label in rows], ("sentence1", "sentence2", "label"))
    return folder


def test_hub_data_set_without_labels_to_evaluate_is_refused(tmp_path, local_model):
    rows = demo_rows()
    folder = hub_layout(tmp_path / "glue-like", {"train": rows[:32], "test": [(text, -1) for text, _ in rows[32:48]]})
    result = run(python_command("--output_dir", str(tmp_path / "outputs"), "--dataset", str(folder),
                                "--model_name_or_path", str(local_model), xla=False), env=child_env(xla=False), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
        f"error: dataset={str(folder)!r} split 'test': 16 of 16 rows have no label (-1, as in GLUE's test splits): "
        "evaluate on a split with labels, or use --dataset files with your own --eval_file"
    ]
    assert not (tmp_path / "outputs" / "report.json").exists()


@pytest.mark.slow
@pytest.mark.layout("data")
def test_hub_code_path_trains_on_a_folder_laid_out_as_a_hub_data_set(tmp_path, local_model):
    """load_dataset with a name, its splits and GLUE's sentence1/sentence2 columns, without a network."""
    rows = demo_rows()
    folder = hub_layout(tmp_path / "glue-like", {"train": rows[:64], "validation": rows[64:101], "test": rows[101:110]})
    output = tmp_path / "outputs"
    run(python_command("--output_dir", str(output), "--dataset", str(folder), "--model_name_or_path", str(local_model),
                       "--max_seq_length", "64", "--num_epochs", "1", "--mixed_precision", "no", "--checkpoint", "false",
                       xla=False), env=child_env(xla=False))
    report = json.loads((output / "report.json").read_text())
    assert (report["data"], report["train_examples"], report["eval_examples_counted"]) == (str(folder), 64, 37)
    # The export's card names the model it was fine-tuned from, and the data.
    card = ModelCard.load(output / "model" / "README.md")
    assert card.data.base_model == str(local_model) and f"Fine-tuned from `{local_model}`." in card.text
    assert f"- trained on `{folder}`: 64 examples\n- evaluated on 37 examples\n" in card.text
    assert "- on cpu x 1 processes: no XLA device" in card.text
