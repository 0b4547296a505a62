"""Predictions over a file with an exported model: predict.py's loop.

{% if cookiecutter.task == "causal-lm" -%}
A causal LM continues each prompt greedily on the host's CPU, in the main process, one prompt at a time
(tasks/samples.py): generation on the XLA device with a static cache is not written yet.
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

{% if cookiecutter.task != "causal-lm" -%}
import torch

from ..data import batching
from ..launch import processes
from ..tasks import task
from ..watch.compilations import compile_counts
from ..xla import device as devices
{%- else -%}
from ..launch import processes
from ..tasks import samples
{%- endif %}

ROW = "row"  # each example's line among the input's examples, from 0: what puts the gathered rows back in order


class PredictionProblem(ValueError):
    """Bad input to predict.py: said in one line, exit status 2, no output file."""


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
    gathered = sorted(pair for share in processes.gather_objects(accelerator, mine) for pair in share)
    if [row for row, _ in gathered] != list(range(len(examples))):
        raise RuntimeError(f"prediction: {len(gathered)} rows gathered for {len(examples)} inputs, not each once")
    labels = layout.plain_model(accelerator).config.id2label
    predictions = []
    for row, chances in gathered:
        best = max(range(len(chances)), key=chances.__getitem__)
        predictions.append({ROW: row, "label": best, "label_name": labels.get(best, str(best)),
                            **{f"probability_{label}": chance for label, chance in enumerate(chances)}})
    last = compile_counts().compilations
    figures = {"examples": len(examples), "seconds": seconds, "examples_per_second": len(examples) / seconds,
               "graphs_after_first_batch": None if last is None else last - first_batch_graphs}
    return predictions, figures
{%- else %}


def predict(accelerator, layout, model_folder, tokenizer, prompts: list[str], config) -> tuple[list[dict], dict]:
    """(each prompt's greedy continuation, in input order; the run's figures), made on the host's CPU."""
    started = time.perf_counter()
    made = samples.continue_greedily(model_folder, tokenizer, prompts, config.max_new_tokens) \
        if processes.is_main(accelerator) else []
    seconds = time.perf_counter() - started
    tokens = sum(len(tokenizer(sample["continuation"], add_special_tokens=False)["input_ids"]) for sample in made)
    predictions = [{ROW: row, **sample} for row, sample in enumerate(made)]
    figures = {"examples": len(prompts), "seconds": seconds, "generated_on": "the host's CPU",
               "new_tokens_per_second": tokens / seconds if seconds else None}
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
