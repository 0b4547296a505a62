"""Instruction data for the causal LM: prompt/completion and chat `messages` files, packed into blocks like plain
text, with the loss on the answers only (labels -100 on prompts and user turns), checked token by token; the
errors a wrong file gets; and a short run of the demo model on the shipped instruction files (in a data-layout
project: the packing does not depend on the layout).
"""

import json
import math
import shutil

import pytest
from conftest import PROJECT, evaluate_on_cpu, quick, train

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data import packing, preparation
from {{ cookiecutter.project_slug }}.data.instruction_formats import load_data, row_texts
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES, DataProblem
from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer
from {{ cookiecutter.project_slug }}.tasks import instructions
from {{ cookiecutter.project_slug }}.tasks.causal_lm import IGNORED, build_model, load_examples, pack_examples
from {{ cookiecutter.project_slug }}.tasks.instructions import prompt_completion_examples

LENGTH = 64
TRAIN_FILE = PROJECT / "data" / "demo-lm" / "instructions-train.jsonl"
EVAL_FILE = PROJECT / "data" / "demo-lm" / "instructions-eval.jsonl"
EOS, PAD = 99, 0


class Words:
    """A tokenizer whose tokens are the numbers written in the text: every id is visible in the test."""

    eos_token_id, pad_token_id = EOS, PAD

    def __call__(self, texts, add_special_tokens):
        return {"input_ids": [[int(word) for word in text.split()] for text in texts]}


def flat(blocks, column):
    """A column of all blocks joined, the padding (attention mask 0) left out."""
    return [value for block in blocks for value, real in zip(block[column], block["attention_mask"], strict=True) if real]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def files_config(train_file, eval_file=None, **extra) -> TrainConfig:
    settings = {"demo": True, "max_seq_length": LENGTH, **extra}
    return TrainConfig(train_file=str(train_file), eval_file=str(eval_file or train_file), **settings)


def test_prompt_tokens_are_masked_and_completion_and_eos_are_labelled_token_by_token():
    examples = prompt_completion_examples(["1 2", "3", "4 5 6"], ["7 8 9", "10", "11"], Words())
    assert examples == [
        ([1, 2, 7, 8, 9, EOS], [IGNORED, IGNORED, 7, 8, 9, EOS]),
        ([3, 10, EOS], [IGNORED, 10, EOS]),
        ([4, 5, 6, 11, EOS], [IGNORED, IGNORED, IGNORED, 11, EOS]),
    ]
    blocks = pack_examples(examples, 4, PAD, train=False)
    assert blocks["input_ids"] == [[1, 2, 7, 8], [9, EOS, 3, 10], [EOS, 4, 5, 6], [11, EOS, PAD, PAD]]
    assert blocks["labels"] == [[IGNORED, IGNORED, 7, 8], [9, EOS, IGNORED, 10], [EOS, IGNORED, IGNORED, IGNORED],
                                [11, EOS, IGNORED, IGNORED]]


def test_training_drops_the_short_last_block_and_blocks_with_nothing_to_score():
    # The long prompt fills a block of its own: with no labelled target its mean loss would be 0/0 = NaN. So does a
    # block whose only label is its first token (the loss shifts labels by one: a first token is no target).
    examples = prompt_completion_examples(["1 2 3", "4 5 6 7 8 9 10", "11 12"], ["13", "14", "15 16"], Words())
    evaluation = pack_examples(examples, 4, PAD, train=False)
    assert evaluation["input_ids"] == [[1, 2, 3, 13], [EOS, 4, 5, 6], [7, 8, 9, 10], [14, EOS, 11, 12], [15, 16, EOS, PAD]]
    assert evaluation["labels"] == [[IGNORED, IGNORED, IGNORED, 13], [EOS, IGNORED, IGNORED, IGNORED],
                                    [IGNORED] * 4, [14, EOS, IGNORED, IGNORED], [15, 16, EOS, IGNORED]]
    training = pack_examples(examples, 4, PAD, train=True)
    assert training["input_ids"] == [evaluation["input_ids"][index] for index in (0, 3)]
    assert training["labels"] == [evaluation["labels"][index] for index in (0, 3)]


def reference_blocks(examples, length: int, pad_id: int, train: bool) -> dict:
    """The blocks as the project cut them before datasets prepared them: every token joined in Python lists."""
    ids = [token for row, _ in examples for token in row]
    labels = [label for _, row in examples for label in row]
    blocks = [(ids[start:start + length], labels[start:start + length]) for start in range(0, len(ids), length)]
    if train:
        blocks = [block for block in blocks if len(block[0]) == length and set(block[1][1:]) != {IGNORED}]
    return {"input_ids": [row + [pad_id] * (length - len(row)) for row, _ in blocks],
            "attention_mask": [[1] * len(row) + [0] * (length - len(row)) for row, _ in blocks],
            "labels": [row + [IGNORED] * (length - len(row)) for _, row in blocks]}


@pytest.mark.parametrize(("files", "length"), [("demo", 16), ("instructions", 8), ("chat", 16)])
def test_prepared_blocks_are_exactly_the_joined_lists_cut_in_workers_and_then_read_from_the_cache(
    tmp_path, monkeypatch, files, length
):
    """datasets' map in 2 workers, a batch of 7 blocks at a time (blocks straddle batches and workers): the blocks
    of a split joined in Python lists, bit for bit. Run again on the same files, all of it comes from the cache."""
    monkeypatch.setattr(preparation, "ROWS_PER_WORKER", 10)
    monkeypatch.setattr(packing, "BLOCKS_PER_BATCH", 7)
    chat = tmp_path / "chat.jsonl"
    write_jsonl(chat, CHAT * 20)
    paths = {"demo": (DEMO_FILES["train"], DEMO_FILES["eval"]), "instructions": (TRAIN_FILE, EVAL_FILE),
             "chat": (chat, chat)}[files]
    # Copies: files of their own, which no earlier run prepared (datasets keys its cache by the files' path and time).
    paths = [shutil.copy(path, tmp_path / f"{index}{path.suffix}") for index, path in enumerate(paths)]
    config = files_config(*paths, max_seq_length=length, preprocessing_num_workers=2)
    (data, tokenizer, *blocks), _, cached = preparation.timed(lambda: load_examples(config, demo=True))
    assert cached is False
    for split, prepared in zip(("train", "eval"), blocks, strict=True):
        examples = instructions.examples(getattr(data, split), data.format, data.text_column, tokenizer, split)
        assert prepared.to_dict() == reference_blocks(examples, length, tokenizer.pad_token_id, train=split == "train")
    (_, _, *again), _, cached = preparation.timed(lambda: load_examples(config, demo=True))
    assert cached is True and [split.to_dict() for split in again] == [split.to_dict() for split in blocks]


@pytest.fixture(scope="module")
def shipped():
    """(tokenizer, rows, train blocks, eval blocks) of the shipped instruction files at LENGTH, the demo tokenizer."""
    _, tokenizer, train_blocks, eval_blocks = load_examples(files_config(TRAIN_FILE, EVAL_FILE), demo=True)
    rows = [json.loads(line) for line in EVAL_FILE.read_text().splitlines()]
    return tokenizer, rows, train_blocks, eval_blocks


def test_the_shipped_eval_file_is_every_example_once_only_completions_and_eos_labelled(shipped):
    tokenizer, rows, _, eval_blocks = shipped
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    eos = tokenizer.eos_token_id
    expected_ids = [token for row in rows for token in ids(row["prompt"]) + ids(row["completion"]) + [eos]]
    expected_labels = [label for row in rows
                       for label in [IGNORED] * len(ids(row["prompt"])) + ids(row["completion"]) + [eos]]
    assert flat(eval_blocks, "input_ids") == expected_ids
    assert flat(eval_blocks, "labels") == expected_labels
    assert all(len(block["input_ids"]) == LENGTH for block in eval_blocks)
    # What is scored, joined: each completion and its EOS, once, in order.
    scored = [label for label in flat(eval_blocks, "labels") if label != IGNORED]
    assert scored == [token for row in rows for token in ids(row["completion"]) + [eos]]


def test_the_shipped_training_blocks_are_full_and_each_scores_something(shipped):
    _, _, train_blocks, _ = shipped
    assert len(train_blocks) > 100
    for block in train_blocks:
        assert len(block["input_ids"]) == LENGTH and sum(block["attention_mask"]) == LENGTH
        assert any(label != IGNORED for label in block["labels"][1:])
        assert all(label in (IGNORED, token) for label, token in zip(block["labels"], block["input_ids"], strict=True))
    labels = flat(train_blocks, "labels")
    assert 0 < labels.count(IGNORED) < len(labels)  # prompts masked, completions not


CHAT = [
    {"messages": [
        {"role": "system", "content": "You write short reviews."},
        {"role": "user", "content": "Review the kettle please."},
        {"role": "assistant", "content": "The kettle is solid."},
        {"role": "user", "content": "And the fan?"},
        {"role": "assistant", "content": "The fan is awful!"},
    ]},
    {"messages": [
        {"role": "user", "content": "Review the printer please."},
        {"role": "assistant", "content": "The printer is superb."},
    ]},
]
ASKED = {"you", "write", "short", "reviews", "review", "please", "and", "?", "system", "user"}  # never answered


def check_chat(tokenizer, eval_blocks, end_of_turn: list[str], appended: list[str]):
    """The stream is each conversation as the template renders it, then `appended` (an EOS, unless the template
    ended it with one); the labelled tokens are the assistant turns' (content, then end_of_turn) and `appended`."""
    ids, labels = flat(eval_blocks, "input_ids"), flat(eval_blocks, "labels")
    rendered = [token for row in CHAT
                for token in tokenizer.tokenize(tokenizer.apply_chat_template(row["messages"], tokenize=False)) + appended]
    assert tokenizer.convert_ids_to_tokens(ids) == rendered
    answers = [token for row in CHAT
               for token in [token for turn in row["messages"] if turn["role"] == "assistant"
                             for token in tokenizer.tokenize(turn["content"]) + end_of_turn] + appended]
    assert tokenizer.convert_ids_to_tokens([label for label in labels if label != IGNORED]) == answers
    assert all(label in (IGNORED, token) for label, token in zip(labels, ids, strict=True))
    asked = [label for token, label in zip(tokenizer.convert_ids_to_tokens(ids), labels, strict=True) if token in ASKED]
    assert len(asked) == 14 and set(asked) == {IGNORED}  # the system and user turns: read, never scored


def test_chat_messages_on_the_demo_tokenizer_label_only_the_assistant_turns(tmp_path):
    chat = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    data, tokenizer, _, eval_blocks = load_examples(files_config(chat, max_seq_length=16), demo=True)
    assert data.format == "messages"
    # The demo's chat template ends each turn with [SEP], its EOS: no second EOS after a conversation.
    check_chat(tokenizer, eval_blocks, end_of_turn=["[SEP]"], appended=[])


def test_chat_messages_with_a_chatml_template_label_the_assistant_turns_and_the_eos(tmp_path):
    """A tokenizer folder with a ChatML template like Qwen's: `<|im_end|>` ends a turn, the EOS ends the example."""
    chat = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    config = files_config(chat)
    tokenizer = load_tokenizer(config.data, config.model, True, row_texts)  # WordPiece, its vocabulary from the chat's words
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    # In a file of its own (copied, not rendered, by cookiecutter): a chat template is Jinja.
    tokenizer.chat_template = (PROJECT / "tests" / "chatml_template.jinja").read_text().strip()
    tokenizer.save_pretrained(tmp_path / "chatml")
    config = files_config(chat, demo=False, model_name_or_path=str(tmp_path / "chatml"), max_seq_length=16)
    _, tokenizer, _, eval_blocks = load_examples(config, demo=False)
    check_chat(tokenizer, eval_blocks, end_of_turn=["<|im_end|>"], appended=[tokenizer.eos_token])


def test_the_other_paddings_keep_the_mask_one_example_per_row():
    for padding in ("longest", "dynamic"):
        _, tokenizer, train_rows, _ = load_examples(files_config(TRAIN_FILE, EVAL_FILE, padding=padding), demo=True)
        assert len(train_rows) == 1200  # one row per example
        first = json.loads(TRAIN_FILE.read_text().splitlines()[0])
        prompt = tokenizer(first["prompt"], add_special_tokens=False)["input_ids"]
        completion = tokenizer(first["completion"], add_special_tokens=False)["input_ids"]
        row = len(prompt) + len(completion) + 1
        assert train_rows[0]["labels"][:row] == [IGNORED] * len(prompt) + completion + [tokenizer.eos_token_id]
        assert set(train_rows[0]["labels"][row:]) <= {IGNORED}


@pytest.mark.parametrize(("rows", "problem"), [
    ([{"question": "a", "answer": "b"}],
     r"line 1: no column 'text' \(columns: question, answer\); a causal LM trains on a 'text' column, 'prompt' and "
     r"'completion' columns, or a 'messages' column"),
    ([{"prompt": "a", "completion": "b"}, {"prompt": "c"}], r"line 2: no column 'completion'"),
    ([{"prompt": "a", "completion": " "}], r"line 1: column 'completion' has no text to train on"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], r"line 1: column 'messages': no 'assistant' turn"),
    ([{"messages": [{"role": "assistant"}]}], r"line 1: column 'messages' turn 0: must be an object with text 'role' and 'content'"),
    ([{"messages": "user: hi"}], r"line 1: column 'messages' holds text, not a list of turns"),
])
def test_a_file_that_is_no_format_or_a_broken_one_is_refused_naming_the_column(tmp_path, rows, problem):
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    with pytest.raises(DataProblem, match=problem):
        load_data(files_config(path).data, demo=True)


def test_train_and_eval_files_of_different_formats_are_refused(tmp_path):
    chat = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    with pytest.raises(DataProblem, match=r"chat.jsonl: messages examples, but .*instructions-train.jsonl holds "
                                          r"prompt-completion examples; give both files one format"):
        load_data(files_config(TRAIN_FILE, chat).data, demo=True)


def test_messages_need_a_tokenizer_with_a_chat_template(tmp_path):
    demo = TrainConfig(demo=True)
    load_tokenizer(demo.data, demo.model, demo=True).save_pretrained(tmp_path / "plain")  # WordPiece, no template
    chat = write_jsonl(tmp_path / "chat.jsonl", CHAT)
    config = files_config(chat, demo=False, model_name_or_path=str(tmp_path / "plain"))
    with pytest.raises(DataProblem, match=r"column 'messages': the tokenizer has no chat template .* use 'prompt' and "
                                          r"'completion' columns instead"):
        load_examples(config, demo=False)


@pytest.fixture(scope="module")
def instruction_run(tmp_path_factory):
    """A short fp32 run of the demo model on the shipped instruction files: one epoch of all its blocks (about 460,
    28 steps; QUICK's 96 blocks, 6 steps, learn too little of the completions to tell from chance)."""
    folder = tmp_path_factory.mktemp("instructions")
    return train(folder, *quick("--mixed_precision", "no", "--max_train_examples", "10000",
                                "--train_file", str(TRAIN_FILE), "--eval_file", str(EVAL_FILE)))


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_the_demo_model_learns_the_shipped_instructions_in_two_graphs(instruction_run, shipped):
    tokenizer, _, _, eval_blocks = shipped
    report, result = instruction_run
    # The run says, and the report keeps, that it read instruction data and what its loss covers.
    covers = "instruction data, the loss covers the completions and each example's EOS (prompts masked)"
    assert report["data_format"] == {"format": "prompt-completion", "loss": covers}
    assert f"data: files, prompt-completion: {covers}" in result.stdout.splitlines()
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    assert report["eval_examples_counted"] == len(eval_blocks)
    # Only the labelled targets count: completions and EOS, not prompts (a block's first token is no target).
    assert report["eval_tokens_counted"] == sum(label != IGNORED for block in eval_blocks for label in block["labels"][1:])
    config = files_config(TRAIN_FILE, EVAL_FILE)
    untrained = evaluate_on_cpu(build_model(config, demo=True, vocab_size=len(tokenizer)), tokenizer, eval_blocks, LENGTH)
    assert math.isfinite(report["eval_loss"]) and report["eval_loss"] < untrained["eval_loss"] - 0.5, (
        report["eval_loss"], untrained["eval_loss"])


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_lora_on_a_trained_base_learns_the_instructions_at_its_default_rate(tmp_path):
    """The way most LLM fine-tuning runs: a trained base (the demo model after an epoch of plain text, exported),
    LoRA adapters (--lora_r 8), instruction data, and no --learning_rate: the adapters' default rate (ten times the
    baked fine-tuning rate). One epoch of the shipped instructions (47 steps) must lower the completions' eval loss
    by more than 0.005 nats below the base's own, evaluated in float32 on the host. Measured: 4.5741 -> 4.5616 at this
    rate; at the full fine-tuning rate (2e-5) only to 4.5723, which this bar tells apart."""
    base, _ = train(tmp_path / "base", *quick("--mixed_precision", "no", "--checkpoint", "false"))
    base_folder = base["exported"]
    lora = ["--demo", "false", "--model_name_or_path", base_folder, "--dataset", "files",
            "--train_file", str(TRAIN_FILE), "--eval_file", str(EVAL_FILE)]
    report, _ = train(tmp_path / "lora", *quick("--mixed_precision", "no", "--max_train_examples", "10000",
                                                "--checkpoint", "false", "--lora_r", "8", *lora))
    assert report["learning_rate"]["first_step"] == pytest.approx(10 * TrainConfig().pretrained_learning_rate)
    assert report["xla_compilations"] == 2 and report["recompilations"] == 0
    config = TrainConfig(demo=False, model_name_or_path=base_folder, dataset="files", train_file=str(TRAIN_FILE),
                         eval_file=str(EVAL_FILE), max_seq_length=LENGTH)
    _, tokenizer, _, eval_blocks = load_examples(config, demo=False)
    from transformers import AutoModelForCausalLM

    before = evaluate_on_cpu(AutoModelForCausalLM.from_pretrained(base_folder), tokenizer, eval_blocks, LENGTH)
    assert report["eval_tokens_counted"] == before["eval_tokens_counted"]
    assert report["eval_loss"] < before["eval_loss"] - 0.005, (report["eval_loss"], before["eval_loss"])
