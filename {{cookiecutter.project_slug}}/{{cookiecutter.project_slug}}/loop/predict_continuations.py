"""predict.py's loop for a causal LM: an exported model's continuation of every prompt of a file.

A causal LM continues each prompt on the device (loop/generation.py: a static KV cache, a prefill graph and one
decode graph for every step), the prompts in fixed-shape batches as the classifier's rows are, each process its
share, the rows gathered in input order (prediction.py). `--generate_on host` continues them on the host's CPU
instead, one prompt at a time as the run's samples are (tasks/samples.py): the benchmark compares the two
(benchmarks/test_generation.py).
"""

import time

import torch

from ..data import batching
from ..launch import processes
from ..tasks import samples
from ..watch.compilations import compile_counts
from . import generation
from .context import RunContext
from .prediction import ROW, graphs_since, in_input_order


def predict(context: RunContext, model, tokenizer, prompts: list[str]) -> tuple[list[dict], dict]:
    """(each prompt and its continuation, in input order; the run's figures)."""
    accelerator, layout, config = context.accelerator, context.layout, context.config
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
    pin_rows = generation.row_pinning(layout)
    decoding = generation.Decoding(config.max_new_tokens, end_id, pad_id, config.temperature)
    started = time.perf_counter()
    for batch in layout.eval_batches(loader):
        valid, row = batch.pop(batching.VALID), batch.pop(ROW)
        with torch.no_grad():
            made = generation.continue_batch(model, plain.config, batch, decoding, pin_rows)
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
