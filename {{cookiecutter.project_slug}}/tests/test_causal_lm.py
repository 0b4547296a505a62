"""The causal-LM task: packed blocks of exactly max_seq_length tokens, every eval token counted once, and a demo
that learns. The loop, checkpoints, layouts and watch are the shared ones, tested by the other files here. Its runs
do not depend on the layout: they run in a data-layout project (tests/conftest.py); an fsdp project trains the demo
on 8 devices (test_chip_count.py) and against one device (test_fsdp.py).
"""

import math

import pytest
from conftest import DEMO_BAR, evaluate_on_cpu, quick, train
from huggingface_hub import ModelCard
from transformers import AutoTokenizer

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES, load_text_data
from {{ cookiecutter.project_slug }}.tasks.causal_lm import IGNORED, build_model, load_examples, pack_examples
from {{ cookiecutter.project_slug }}.tasks.instructions import text_examples
from {{ cookiecutter.project_slug }}.tasks.samples import continue_greedily

LENGTH = 64


@pytest.fixture(scope="module")
def demo():
    """(tokenizer, train blocks, eval blocks, the eval texts' token count with one EOS each) at LENGTH."""
    config = TrainConfig(demo=True, max_seq_length=LENGTH)
    _, tokenizer, train_blocks, eval_blocks = load_examples(config, demo=True)
    texts = load_text_data(config.data, demo=True).eval["text"]
    tokens = sum(len(ids) + 1 for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"])
    return tokenizer, train_blocks, eval_blocks, tokens


def test_training_blocks_are_full_and_unpadded(demo):
    _, train_blocks, _, _ = demo
    assert len(train_blocks) > 0
    for block in train_blocks:
        assert len(block["input_ids"]) == LENGTH and sum(block["attention_mask"]) == LENGTH
        assert block["labels"] == block["input_ids"]


def test_eval_blocks_hold_every_token_once_the_last_padded_and_masked(demo):
    tokenizer, _, eval_blocks, tokens = demo
    *full, last = list(eval_blocks)
    assert all(sum(block["attention_mask"]) == LENGTH for block in full)
    real = sum(last["attention_mask"])
    assert len(full) * LENGTH + real == tokens  # every token of every text, plus its EOS, exactly once
    assert len(last["input_ids"]) == LENGTH
    assert last["labels"][real:] == [IGNORED] * (LENGTH - real)
    assert last["input_ids"][real:] == [tokenizer.pad_token_id] * (LENGTH - real)


def test_packing_joins_texts_with_eos():
    class Words:
        eos_token_id, pad_token_id = 9, 0

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[int(word) for word in text.split()] for text in texts]}

    examples = text_examples(["1 2 3", "4 5", "6"], Words())
    blocks = pack_examples(examples, 4, Words.pad_token_id, train=False)
    assert blocks["input_ids"] == [[1, 2, 3, 9], [4, 5, 9, 6], [9, 0, 0, 0]]
    assert blocks["labels"][-1] == [9, IGNORED, IGNORED, IGNORED]
    assert len(pack_examples(examples, 4, Words.pad_token_id, train=True)) == 2


def untrained_perplexity(max_seq_length: int) -> float:
    """The demo model before any step, evaluated on the plain CPU with the project's eval step."""
    config = TrainConfig(demo=True, max_seq_length=max_seq_length)
    _, tokenizer, _, eval_blocks = load_examples(config, demo=True)
    model = build_model(config, demo=True, vocab_size=len(tokenizer))
    return evaluate_on_cpu(model, tokenizer, eval_blocks, max_seq_length)["eval_perplexity"]


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_the_default_demo_learns_well_below_its_starting_perplexity(demo_report):
    """The default demo (baked epochs, batch and length, bf16 as baked), on two CPU cores."""
    report, _ = demo_report("fp32")
    start = untrained_perplexity(report["config"]["max_seq_length"])
    assert start > 3 * DEMO_BAR  # about the vocabulary's size: an untrained model guesses
    assert report["eval_perplexity"] <= DEMO_BAR, report["eval_perplexity"]
    assert report["eval_perplexity"] == pytest.approx(math.exp(report["eval_loss"]))


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_a_run_compiles_two_graphs_and_epochs_add_none(demo_report):
    report, _ = demo_report("fp32")
    # The report's config is what the run used: the demo's model and files, not the bake's model and data set.
    used = report["config"]
    assert used["demo"] is True and used["model_name_or_path"] == "the demo's LlamaForCausalLM, built from a config (random weights)"
    assert (used["dataset"], used["train_file"], used["eval_file"]) == ("files", str(DEMO_FILES["train"]), str(DEMO_FILES["eval"]))
    # The steady step (the first step already has the optimizer's state: loop/adamw.py), the evaluation step.
    assert report["xla_compilations"] == 2
    assert [graph["phase"] for graph in report["graphs"]["graphs"]] == ["train", "eval"]
    assert len(set(report["process_compilations_after_each_epoch"])) == 1 and report["recompilations"] == 0
    assert report["train_padding_fraction"] == 0
    assert report["steady_tokens_per_second"] == pytest.approx(
        report["steady_examples_per_second"] * report["config"]["max_seq_length"]
    )
    # The export's model card, read as the hub reads it: a text-generation model, its blocks, loss and perplexity.
    card = ModelCard.load(f"{report['exported']}/README.md")
    assert (card.data.pipeline_tag, card.data.base_model) == ("text-generation", None)
    assert (f"- evaluated on {report['eval_examples_counted']} blocks of {used['max_seq_length']} tokens "
            f"({report['eval_tokens_counted']} tokens counted)") in card.text
    assert f"| perplexity | {report['eval_perplexity']:.4f} |" in card.text
    assert f"| loss | {report['eval_loss']:.4f} |" in card.text


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("bit for bit", "greedy samples: the run's against the same export continued again on the host")
def test_the_trained_model_writes_greedy_samples_generated_on_the_host(demo_report):
    """Two continuations of eval prompts, printed and reported: the export's greedy ones, made on the CPU after the
    run's counts (still 2 graphs), so the same folder gives the same words here."""
    report, result = demo_report("fp32")
    assert report["xla_compilations"] == 2
    found = report["samples"]
    assert len(found) == 2 and all(sample["prompt"] and sample["continuation"].strip() for sample in found)
    for index, sample in enumerate(found, start=1):
        assert f"sample {index}: {sample['prompt']!r} -> {sample['continuation']!r}" in result.stdout
    tokenizer = AutoTokenizer.from_pretrained(report["exported"])
    again = continue_greedily(report["exported"], tokenizer, [sample["prompt"] for sample in found])
    assert again == found
    assert "torch_dtype" not in result.stderr  # the project's own loading uses current APIs (from_pretrained's dtype=)


def test_samples_must_be_zero_or_more():
    with pytest.raises(ConfigError, match="samples=-1"):
        TrainConfig(samples=-1)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_eval_counts_every_token_once_and_reports_the_padding(tmp_path, demo):
    _, _, eval_blocks, tokens = demo
    report, _ = train(tmp_path, *quick("--mixed_precision", "no", "--max_seq_length", str(LENGTH)))
    assert report["eval_examples_counted"] == len(eval_blocks)
    # Each block's first token has no prediction in it: every other token is predicted once.
    assert report["eval_tokens_counted"] == tokens - len(eval_blocks)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_one_text_per_row_padded_to_the_longest_is_one_shape_with_padding(tmp_path):
    report, _ = train(tmp_path, *quick("--mixed_precision", "no", "--padding", "longest"))
    assert report["recompilations"] == 0 and report["xla_compilations"] == 2
    assert 0 < report["train_padding_fraction"] < 1
