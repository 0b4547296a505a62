"""Predictions over a file with an exported model: predict.py's loop.

{% if cookiecutter.task == "causal-lm" -%}
A causal LM continues each prompt on the device (loop/generation.py: a static KV cache, a prefill graph and one
decode graph for every step), the prompts in fixed-shape batches as the classifier's rows are, each process its
share, the rows gathered in input order. `--generate_on host` continues them on the host's CPU instead, one prompt
at a time as the run's samples are (tasks/samples.py): the benchmark compares the two (benchmarks/test_generation.py).
{%- else -%}
The classifier runs on the device as evaluation does: every batch padded to one shape (the last one with masked
copies of the first row), each process its share of the batches (each host its chips' share under fsdp), the
class probabilities computed in the graph and read back once, after the last batch. The rows are then gathered in
input order, each exactly once.
{%- endif %}
"""

import csv
import json
import os
import time
from pathlib import Path

import torch

from ..config import UserError
from ..data import batching
from ..launch import processes
{% if cookiecutter.task != "causal-lm" -%}
from ..tasks import task
from ..watch.compilations import compile_counts
from ..xla import device as devices
{%- else -%}
from ..tasks import samples
from ..watch.compilations import compile_counts
from . import generation
{%- endif %}

ROW = "row"  # each example's line among the input's examples, from 0: what puts the gathered rows back in order


class PredictionProblem(UserError, ValueError):
    """Bad input to predict.py: said in one line, exit status 2, no output file."""


def in_input_order(accelerator, mine: list[tuple[int, object]], count: int) -> list[tuple[int, object]]:
    """Every process's (row, result) pairs, gathered and sorted by row; each of the `count` input rows exactly once."""
    gathered = sorted((pair for share in processes.gather_objects(accelerator, mine) for pair in share),
                      key=lambda pair: pair[0])
    if [row for row, _ in gathered] != list(range(count)):
        raise RuntimeError(f"prediction: {len(gathered)} rows gathered for {count} inputs, not each once")
    return gathered


def graphs_since(first_batch_graphs: int | None) -> int | None:
    """Graphs compiled after the first batch's (None where nothing counts them: no XLA)."""
    last = compile_counts().compilations
    return None if last is None or first_batch_graphs is None else last - first_batch_graphs


{%- if cookiecutter.task != "causal-lm" %}


def predict(accelerator, layout, model, tokenizer, examples, config) -> tuple[list[dict], dict]:
    """(each input row's prediction, in input order; the run's figures) for the examples of the input file."""
    collator = task.make_collator(tokenizer, "fixed", config.max_seq_length)
    loader = batching.eval_loader(examples, collator, config.batch_size, layout.loader_shards(accelerator))
    model, loader = layout.prepare_prediction(accelerator, model, loader)
    model.eval()
    device, found, first_batch_graphs = accelerator.device, [], None
    started = time.perf_counter()
    for batch in layout.eval_batches(loader):
        valid, rows = batch.pop(batching.VALID), batch.pop(ROW)
        with torch.no_grad():
            probabilities = torch.softmax(model(**batch).logits.float(), dim=-1)
        devices.sync(device)
        found.append((rows, valid, probabilities))  # read back after the last batch: no batch waits for a read
        if first_batch_graphs is None:
            first_batch_graphs = compile_counts().compilations
    mine = [(int(row), [float(p) for p in chances])
            for rows, valid, probabilities in ((r.cpu(), v.cpu(), p.cpu()) for r, v, p in found)
            for row, real, chances in zip(rows.tolist(), valid.tolist(), probabilities, strict=True) if real]
    seconds = time.perf_counter() - started
    gathered = in_input_order(accelerator, mine, len(examples))
    labels = layout.plain_model(accelerator).config.id2label
    predictions = []
    for row, chances in gathered:
        best = max(range(len(chances)), key=chances.__getitem__)
        predictions.append({ROW: row, "label": best, "label_name": labels.get(best, str(best)),
                            **{f"probability_{label}": chance for label, chance in enumerate(chances)}})
    figures = {"examples": len(examples), "seconds": seconds, "examples_per_second": len(examples) / seconds,
               "graphs_after_first_batch": graphs_since(first_batch_graphs)}
    return predictions, figures
{%- else %}


def predict(accelerator, layout, model, tokenizer, prompts: list[str], config) -> tuple[list[dict], dict]:
    """(each prompt and its continuation, in input order; the run's figures)."""
    if config.generate_on == "host":
        return _predict_on_host(accelerator, config.model, tokenizer, prompts, config)
    end_id = tokenizer.eos_token_id
    pad_id = next(token for token in (tokenizer.pad_token_id, end_id, 0) if token is not None)
    # A prompt with no tokens starts from the end-of-text token, as the host's samples do.
    tokenized = [ids or [end_id if end_id is not None else pad_id]
                 for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
    plain = model
    length = generation.prompt_length(max(map(len, tokenized)), config.max_new_tokens,
                                      getattr(plain.config, "max_position_embeddings", None))
    rows = [{"input_ids": ids[-length:], ROW: row} for row, ids in enumerate(tokenized)]  # too long: its end kept
    loader = batching.eval_loader(rows, _left_padded(length, pad_id), config.batch_size,
                                  layout.loader_shards(accelerator))
    model, loader = layout.prepare_prediction(accelerator, model, loader)
    model.eval()
    found, first_batch_graphs, first_batch_traced = [], None, None
    started = time.perf_counter()
    for batch in layout.eval_batches(loader):
        valid, row = batch.pop(batching.VALID), batch.pop(ROW)
        with torch.no_grad():
            made = generation.continue_batch(model, plain.config, batch["input_ids"], batch["attention_mask"],
                                             config.max_new_tokens, end_id, pad_id, config.temperature,
                                             layout.pin_rows)
        found.append((row, valid, made))  # read back after the last batch: no batch waits for a read
        if first_batch_graphs is None:
            first_batch_graphs, first_batch_traced = compile_counts().compilations, time.perf_counter()
    batches = [[(int(index), generation.until_end(tokens, end_id))
                for index, real, tokens in zip(row.tolist(), valid.tolist(), made.tolist(), strict=True) if real]
               for row, valid, made in ((r.cpu(), v.cpu(), m.cpu()) for r, v, m in found)]
    seconds = time.perf_counter() - started
    mine = [pair for batch in batches for pair in batch]
    # After the first batch, whose graphs compile: this process's rate once compiled (None with one batch).
    later_tokens = sum(len(tokens) for batch in batches[1:] for _, tokens in batch)
    steady = later_tokens / (started + seconds - first_batch_traced) if len(batches) > 1 else None
    gathered = in_input_order(accelerator, mine, len(prompts))
    predictions = [{ROW: index, "prompt": prompts[index], "continuation": tokenizer.decode(tokens, skip_special_tokens=True)}
                   for index, tokens in gathered]
    new_tokens = sum(len(tokens) for _, tokens in gathered)
    figures = {"examples": len(prompts), "seconds": seconds, "generated_on": "the device",
               "prompt_length": length, "prompts_cut": sum(len(ids) > length for ids in tokenized),
               "new_tokens": new_tokens, "new_tokens_per_second": new_tokens / seconds,
               "steady_new_tokens_per_second": steady,
               "graphs_after_first_batch": graphs_since(first_batch_graphs)}
    return predictions, figures


def _left_padded(length: int, pad_id: int):
    """Batches of prompts padded on the left to `length`: every prompt's last token in the same column, where the
    first new token is read."""
    def collate(rows: list[dict]) -> dict:
        ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for line, row in enumerate(rows):
            count = len(row["input_ids"])
            ids[line, length - count:] = torch.tensor(row["input_ids"])
            mask[line, length - count:] = 1
        return {"input_ids": ids, "attention_mask": mask, ROW: torch.tensor([row[ROW] for row in rows]),
                batching.VALID: torch.tensor([row[batching.VALID] for row in rows])}
    return collate


def _predict_on_host(accelerator, model_folder, tokenizer, prompts: list[str], config) -> tuple[list[dict], dict]:
    """Each prompt's greedy continuation made on the host's CPU by the main process, one prompt at a time."""
    made, seconds = [], 0.0
    if processes.is_main(accelerator):
        model = samples.load_for_generation(model_folder)
        started = time.perf_counter()
        made = samples.continue_with(model, tokenizer, prompts, config.max_new_tokens, counted=True)
        seconds = time.perf_counter() - started
    tokens = sum(sample.pop("new_tokens") for sample in made)
    predictions = [{ROW: row, **sample} for row, sample in enumerate(made)]
    figures = {"examples": len(prompts), "seconds": seconds, "generated_on": "the host's CPU",
               "new_tokens": tokens, "new_tokens_per_second": tokens / seconds if seconds else None}
    return predictions, figures
{%- endif %}


def write_atomically(path, predictions: list[dict]) -> str:
    """CSV or JSON lines by the path's suffix, written beside it and renamed into place: never a partial file."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "w", encoding="utf-8", newline="") as file:
            if path.suffix == ".csv":
                writer = csv.DictWriter(file, fieldnames=list(predictions[0]) if predictions else [ROW])
                writer.writeheader()
                writer.writerows(predictions)
            else:
                file.writelines(json.dumps(prediction, ensure_ascii=False) + "\n" for prediction in predictions)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return str(path)
