"""Where predict.py generates fastest: on the device (a static KV cache, batches of prompts, 2 graphs) or on the host's
CPU (transformers' generate(), one prompt at a time, as the run's samples are).

Both continue the same 32 prompts (the first words of the demo's eval texts) by the same number of tokens with the
demo's model (untrained, as save_pretrained writes it), greedily, in float32; each is predict.py's own run, read from its report. The device's rate is the steady one,
after its first batch (which compiles its 2 graphs); the host compiles nothing. On XLA:CPU the "device" is this
machine's CPU too: the ratio says what batching and the static cache give here, not what a TPU gives.
"""

import csv
import json

import pytest

from . import isolation
from .project_runs import PROJECT, run_project

PROMPTS, WORDS, NEW_TOKENS, BATCH = 32, 5, 32, 8
RESULTS = {}


def save_demo_model(folder: str) -> None:
    """The demo's Llama and tokenizer as save_pretrained writes them, untrained (no run to wait for; random weights
    rarely end a text early, so every prompt gets its 32 tokens). Run in a forked child: the package's imports stay
    out of this process."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer
    from {{ cookiecutter.project_slug }}.tasks import task

    config = TrainConfig(demo=True)
    tokenizer = load_tokenizer(config.data, config.model, demo=True)
    task.build_model(config, demo=True, vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def export_and_prompts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generation")
    isolation.run(save_demo_model, str(folder / "model"))
    with open(PROJECT / "data" / "demo-lm" / "eval.csv", newline="", encoding="utf-8") as file:
        texts = [row["text"] for row in csv.DictReader(file)][:PROMPTS]
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": " ".join(text.split()[:WORDS])}) + "\n" for text in texts),
                       encoding="utf-8")
    return str(folder / "model"), prompts


@pytest.mark.benchmark(group="causal-lm: generation")
@pytest.mark.parametrize("where", ["device", "host"])
@pytest.mark.compares("float32", "the number of new tokens of greedy continuations: the device against the host")
def test_generation(benchmark, tmp_path, export_and_prompts, where):
    model, prompts = export_and_prompts
    report = benchmark.pedantic(run_project, args=(
        tmp_path / "continued.jsonl", "--model", model, "--input", str(prompts), "--generate_on", where,
        "--max_new_tokens", str(NEW_TOKENS), "--batch_size", str(BATCH), "--parallelism", "data",
        "--mixed_precision", "no",  # float32 both ways: the same arithmetic, the same continuations
    ), kwargs={"module": "predict_cli"}, rounds=1, iterations=1)
    rate = report["steady_new_tokens_per_second"] if where == "device" else report["new_tokens_per_second"]
    RESULTS[where] = (report, rate)
    benchmark.extra_info.update(
        headline="new_tokens_per_second", generated_on=report["generated_on"], new_tokens_per_second=rate,
        new_tokens=report["new_tokens"], graphs=report["graphs"], prompts=report["examples"], device=report["device"],
    )
    if where == "device":
        assert (report["graphs"], report["graphs_after_first_batch"]) == (2, 0)
    if len(RESULTS) == 2:
        (device, device_rate), (host, host_rate) = RESULTS["device"], RESULTS["host"]
        assert device["new_tokens"] == host["new_tokens"]  # the same continuations' lengths: the same work counted
        benchmark.extra_info["device_over_host"] = device_rate / host_rate
