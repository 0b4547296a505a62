"""predict.py's loop for a classifier: an exported model's labels for every row of a file, on the device.

The classifier runs on the device as evaluation does: every batch padded to one shape (the last one with masked
copies of the first row), each process its share of the batches (each host its chips' share under fsdp), the
class probabilities computed in the graph and read back once, after the last batch. The rows are then gathered in
input order, each exactly once (prediction.py).
"""

import json
import time
from pathlib import Path

import torch

from ..data import batching
from ..tasks import task
from ..watch.compilations import compile_counts
from ..xla import device as devices
from .context import RunContext
from .prediction import ROW, graphs_since, in_input_order


def predict(context: RunContext, model, tokenizer, examples) -> tuple[list[dict], dict]:
    """(each input row's prediction, in input order; the run's figures) for the examples of the input file."""
    accelerator, layout, config = context.accelerator, context.layout, context.config
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


def head_size(model: Path) -> int:
    """The classifier head's labels. transformers writes no id2label for its default 2 labels: its config class says."""
    from transformers import AutoConfig

    folder = model
    if not (model / "config.json").is_file():  # a LoRA export: the head's size is in the base model's config
        folder = json.loads((model / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
    try:
        return AutoConfig.from_pretrained(folder).num_labels
    except Exception:  # the base model out of reach (offline): labels still checked as whole numbers from 0
        return 2**31
