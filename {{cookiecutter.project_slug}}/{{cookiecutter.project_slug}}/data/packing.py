"""Packing tokenized examples into blocks of exactly `length` tokens, in Arrow, off the Python heap, cached on disk.

The examples' (ids, labels) are joined in order and cut every `length` tokens (tasks/causal_lm.py says why). The
join is never built: each block's tokens are found from the examples' offsets (a cumulative sum of their lengths,
8 bytes an example) and read from the memory-mapped Arrow table of the tokenized examples, a batch of blocks at a
time, by datasets' map over the block numbers. The result is written next to the tokenized examples' cache file,
keyed by their fingerprint and the packing's arguments, so that the next run (and the other processes of this one)
read it instead of packing again.
"""

import os

import datasets
import numpy as np
import pyarrow.compute as pc

from . import preparation

IGNORED = -100  # labels the loss skips: padding (and what the task masked: prompts, user turns)
BLOCKS_PER_BATCH = 1000  # blocks one map call cuts: a few MB of tokens, whatever the corpus's size
FEATURES = datasets.Features({
    "input_ids": datasets.Sequence(datasets.Value("int32")),
    "attention_mask": datasets.Sequence(datasets.Value("int8")),
    "labels": datasets.Sequence(datasets.Value("int32")),
})
VERSION = 1  # part of the cache key: a change to how blocks are cut must not read an older run's blocks


def offsets(tokenized: datasets.Dataset) -> np.ndarray:
    """Where each example starts in the joined token stream (and, last, the stream's length)."""
    lengths = pc.list_value_length(tokenized.data.table.column("input_ids")).to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])


def pack(tokenized: datasets.Dataset, length: int, pad_id: int, train: bool, workers: int | None) -> datasets.Dataset:
    """Blocks of `length` tokens with their attention mask and labels (see cut), of input_ids (and labels) rows."""
    starts = offsets(tokenized)
    total = int(starts[-1])
    count = total // length if train else -(-total // length)  # training drops the short last block
    blocks = datasets.Dataset.from_dict({"block": np.arange(count, dtype=np.int64)})
    # What decides the blocks; it names the cache file (and the result's fingerprint: nothing else is hashed).
    key = datasets.fingerprint.Hasher.hash([tokenized._fingerprint, length, pad_id, train, VERSION])
    # Beside the tokenized examples' cache file; in memory when they are (a data set built in memory).
    folder = os.path.dirname(tokenized.cache_files[0]["filename"]) if tokenized.cache_files else None
    many = preparation.workers(workers) if count >= 20 * BLOCKS_PER_BATCH else None  # starting processes costs seconds
    return blocks.map(
        cut, batched=True, batch_size=BLOCKS_PER_BATCH, remove_columns=["block"], features=FEATURES, num_proc=many,
        fn_kwargs={"tokenized": tokenized, "starts": starts, "length": length, "pad_id": pad_id, "train": train},
        cache_file_name=os.path.join(folder, f"packed-{key}.arrow") if folder else None, new_fingerprint=key,
        desc="packing blocks",
    )


def cut(batch, tokenized, starts, length: int, pad_id: int, train: bool) -> dict:
    """A run of consecutive blocks (their numbers in batch["block"]): ids, mask and labels, each `length` wide.

    Evaluation keeps the short last block, padded (mask 0, labels -100). Training drops every block with no scored
    token: transformers' causal-LM loss is the mean over the labelled targets, and a block (or a whole batch of
    them) of prompts only would make it 0/0 = NaN, which the loss guard stops the run on. (A block's first label is
    no target: the loss shifts the labels by one.)
    """
    numbers = batch["block"]
    start, stop = int(numbers[0]) * length, min((int(numbers[-1]) + 1) * length, int(starts[-1]))
    first = int(np.searchsorted(starts, start, side="right")) - 1  # the example holding the first token
    last = int(np.searchsorted(starts, stop, side="left"))  # past the example holding the last one
    rows = tokenized.with_format("arrow")[first:last]
    skip = start - int(starts[first])
    ids = _joined(rows, "input_ids")[skip:skip + stop - start]
    labels = _joined(rows, labels_of(tokenized))[skip:skip + stop - start]
    width = len(numbers) * length
    real = np.zeros(width, dtype=np.int8)
    real[:len(ids)] = 1
    ids = np.concatenate([ids, np.full(width - len(ids), pad_id, dtype=np.int32)]).reshape(-1, length)
    labels = np.concatenate([labels, np.full(width - len(labels), IGNORED, dtype=np.int32)]).reshape(-1, length)
    mask = real.reshape(-1, length)
    if train:
        scored = (labels[:, 1:] != IGNORED).any(axis=1)
        ids, labels, mask = ids[scored], labels[scored], mask[scored]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def scores_something(labels) -> bool:
    """Whether a row's labels score a token after its first (the first has no prediction)."""
    return any(label != IGNORED for label in labels[1:])


def padded(rows, length: int, pad_id: int) -> dict:
    """input_ids, attention_mask and labels of (ids, labels) rows, each padded to `length` (masked, labels -100): the
    other paddings' rows, which packing's blocks are measured against."""
    columns = {"input_ids": [], "attention_mask": [], "labels": []}
    for ids, labels in rows:
        missing = length - len(ids)
        columns["input_ids"].append(ids + [pad_id] * missing)
        columns["attention_mask"].append([1] * len(ids) + [0] * missing)
        columns["labels"].append(labels + [IGNORED] * missing)
    return columns


def labels_of(tokenized) -> str:
    """The column holding the labels: plain text has none of its own (every token is labelled: its id)."""
    return "labels" if "labels" in tokenized.column_names else "input_ids"


def _joined(rows, column: str) -> np.ndarray:
    return pc.list_flatten(rows.column(column)).to_numpy().astype(np.int32, copy=False)

