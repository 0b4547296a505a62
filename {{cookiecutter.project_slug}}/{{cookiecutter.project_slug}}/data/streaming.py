"""--streaming: the train split read as it trains, for data larger than the disk or a hub split too large to download.

The train split is `datasets.load_dataset(..., streaming=True)`, an IterableDataset: nothing is downloaded whole,
converted or cached. Each row is tokenized (tasks/instructions.py's encode) and the tokens packed on the fly into
blocks of exactly max_seq_length, within each run of EXAMPLES_PER_PACK examples, the rest of a run dropped (as
transformers' run_clm.py groups texts): the same one shape as packed training, no new graph. The blocks are not the
non-streaming ones (those are cut from the whole split joined). The eval set is the finite prepared one, as without
streaming.

Each process (data layout) or host (fsdp) reads its own part (`datasets.distributed.split_dataset_by_node`: whole
shards when their count divides by the readers, else every n-th block) into its own batches: no loader of Accelerate
re-shards or dispatches them. The run is one epoch of --max_steps optimizer steps; a stream that runs dry is read
again (its next pass, `set_epoch`). A checkpoint holds each reader's position in its stream as plain JSON (the
IterableDataset's state_dict after the last batch the loop took, not after those prefetched), and a resumed run
continues at the next block instead of skipping batches.
"""

import json
from pathlib import Path

import datasets
import numpy as np
from datasets.distributed import split_dataset_by_node
from torch.utils.data import DataLoader

from ..config.groups import DataOptions
from . import preparation
from .formats import TEXT, DataProblem, TaskChecks, TextData
from .hub import looks_local
from .instruction_formats import MESSAGES, example_format, file_format, format_columns, main_column, messages_problem
from .sources import DEMO_FILES, _format, read_checked, uses_files

IGNORED = -100  # labels the loss skips (tasks/instructions.py)
EXAMPLES_PER_PACK = 1000  # tokenized examples packed together; the tokens past their last whole block are dropped
STATE_FILE = "stream-{}.json"  # in a checkpoint: reader N's position in its stream


def load_data(options: DataOptions, demo: bool) -> TextData:
    """The train split as a stream and the eval split loaded and checked as data/sources.py loads it.

    Local files: the format of each file from its first row, the eval file checked row by row, the train file only
    opened. The hub (or a folder laid out like it): the splits as load_hub_dataset names them, the eval one downloaded.
    """
    if uses_files(options) or demo:
        if uses_files(options) and not (options.train_file and options.eval_file):
            raise DataProblem("train_file and eval_file: give both local files (CSV or JSON lines)")
        files = {"train": options.train_file, "eval": options.eval_file} if uses_files(options) else DEMO_FILES
        found = {split: file_format(path, options.text_column) for split, path in files.items()}
        if found["train"] != found["eval"]:
            raise DataProblem(f"{files['eval']}: {found['eval']} examples, but {files['train']} holds {found['train']} "
                              "examples; give both files one format")
        data_format = found["eval"]
        checks = TaskChecks(row=messages_problem, split=lambda split: None) if data_format == MESSAGES else None
        evaluation = read_checked(files["eval"], format_columns(data_format, options.text_column), checks)
        train = datasets.load_dataset(_format(Path(files["train"])), data_files=str(files["train"]), split="train",
                                      streaming=True)
        source = "files" if uses_files(options) else "demo"
    else:
        name, _, subset = options.dataset.partition("/")
        where = (options.dataset,) if Path(options.dataset).is_dir() or looks_local(options.dataset) else (name, subset or None)
        streams = datasets.load_dataset(*where, streaming=True)
        if "train" not in streams:
            raise DataProblem(f"dataset={options.dataset!r}: no train split (splits: {', '.join(streams)})")
        eval_split = "validation" if "validation" in streams else "test"
        if eval_split not in streams:
            raise DataProblem(f"dataset={options.dataset!r}: no validation or test split to evaluate on")
        evaluation = datasets.load_dataset(*where, split=eval_split)
        train, source = streams["train"], options.dataset
        data_format = example_format(evaluation.column_names, options.text_column)
        if data_format is None:
            raise DataProblem(f"dataset={options.dataset!r}: no 'text' column (give --text_column), nor instructions")
    return TextData(train, evaluation, main_column(data_format, options.text_column), None, source, data_format)


def blocks(data: TextData, tokenizer, length: int, encode_rows) -> datasets.IterableDataset:
    """The train stream tokenized by `encode_rows` (tasks/instructions.py's encode) and packed into blocks of `length`
    tokens, lazily: nothing is read until it is iterated."""
    columns = data.train.column_names
    if columns is None:  # a stream without declared features (JSON lines): its first row's columns
        first = next(iter(data.train.take(1)), None)
        if first is None:
            raise DataProblem(f"{data.source}: the train split has no examples")
        columns = list(first)
    # Tokenized as a prepared split is (preparation.ROWS_PER_BATCH rows a call), each example's tokens kept as one
    # int32 array and the blocks handed on as arrays: Python lists of ints take 36 bytes a token, and a run of a
    # thousand long documents held that way grew the reader by 1.5 GB.
    tokenized = data.train.map(
        encode, batched=True, batch_size=preparation.ROWS_PER_BATCH, with_indices=True, remove_columns=columns,
        fn_kwargs={"data_format": data.format, "text_column": data.text_column, "tokenizer": tokenizer,
                   "encode_rows": encode_rows},
    )
    packed = tokenized.map(pack, batched=True, batch_size=EXAMPLES_PER_PACK, remove_columns=["input_ids", "labels"],
                           fn_kwargs={"length": length})
    packed.cache_files = []  # nothing cached: what data/preparation.py's from_cache asks of a prepared set
    return packed


def encode(rows, indices, data_format: str, text_column: str, tokenizer, encode_rows) -> dict:
    """`encode_rows` of the rows with something to train on: an unchecked stream's rows whose text is missing or
    blank (or whose chat turns are not a list) are skipped."""
    if data_format == TEXT:
        keep = [i for i, text in enumerate(rows[text_column]) if isinstance(text, str) and text.strip()]
    elif data_format == MESSAGES:
        keep = [i for i, turns in enumerate(rows["messages"]) if isinstance(turns, list) and turns]
    else:  # prompt and completion: instructions.examples skips a row without text in them
        keep = range(len(indices))
    kept = {name: [values[i] for i in keep] for name, values in rows.items()}
    encoded = encode_rows(kept, [indices[i] for i in keep], data_format, text_column, tokenizer, "train")
    encoded = {name: [np.asarray(values, dtype=np.int32) for values in column] for name, column in encoded.items()}
    encoded.setdefault("labels", encoded["input_ids"])  # plain text: every token labelled, the ids themselves
    return encoded


def pack(batch, length: int) -> dict:
    """The batch's examples joined and cut into blocks of `length` (the rest dropped); a block with no scored label
    after its first token is dropped too (data/packing.py's cut says why)."""
    empty = np.zeros(0, dtype=np.int32)
    ids, labels = (np.concatenate([empty, *batch[name]]) for name in ("input_ids", "labels"))
    whole = len(ids) // length * length
    ids, labels = ids[:whole].reshape(-1, length), labels[:whole].reshape(-1, length)
    scored = (labels[:, 1:] != IGNORED).any(axis=1)
    ids, labels = ids[scored], labels[scored]
    # One row of each array per block (StreamLoader turns a batch's into lists for the collator).
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": labels}


class StreamLoader:
    """One reader's batches of blocks, --max_steps of them in all; remembers its stream's state after each batch it
    made, so that a checkpoint records where the batches the loop took end (prefetched ones are read again)."""

    rng_types = None  # Accelerate's XLA device loader asks: nothing to synchronise

    def __init__(self, packed, collator, batch_size: int, steps: int):
        self.packed, self.stream, self.shard = packed, None, None  # the reader's part: read_by
        self.collate_fn, self.batch_size, self.steps = collator, batch_size, steps
        self.done = self.taken = 0  # batches the loop took: before this run (a resumed one's), and in all
        self.passes = 0  # how many times the stream ran dry
        self._states = {0: {"pass": 0, "stream": None}}  # by batches taken: the stream's state after them

    def read_by(self, reader: int, readers: int) -> "StreamLoader":
        """This loader, reading reader `reader` of `readers`' own part of the stream (its layout says which:
        parallel/streams.py)."""
        self.stream = split_dataset_by_node(self.packed, rank=reader, world_size=readers)
        self.shard = [reader, readers]
        return self

    def __len__(self) -> int:
        return self.steps - self.done

    def set_epoch(self, epoch: int) -> None:
        """The run is one epoch: the stream's own passes are counted as it runs dry."""

    def sample(self) -> dict:
        """A batch of one row of the blocks' shape, without reading the stream (the fsdp layout's input sharding)."""
        return self.collate_fn([{"input_ids": [0] * 2, "attention_mask": [1] * 2, "labels": [0] * 2}])

    def _batches(self):
        return iter(DataLoader(self.stream, batch_size=self.batch_size, collate_fn=self._collate, drop_last=True))

    def _collate(self, blocks: list) -> dict:
        # The blocks' arrays as lists: DataCollatorForSeq2Seq builds the labels with torch.tensor over its rows,
        # which warns (and is slow) for a list of numpy arrays.
        return self.collate_fn([{name: values.tolist() for name, values in block.items()} for block in blocks])

    def __iter__(self):
        batches = self._batches()
        for number in range(self.done + 1, self.steps + 1):
            batch = next(batches, None)
            if batch is None:  # dry: the next pass over the stream
                self.passes += 1
                self.stream.set_epoch(self.passes)
                batches = self._batches()
                batch = next(batches, None)
                if batch is None:
                    raise DataProblem(f"the train stream of reader {self.shard[0]} of {self.shard[1]} has fewer "
                                      f"blocks than one batch ({self.batch_size})")
            self._states[number] = {"pass": self.passes, "stream": self.stream.state_dict()}
            yield batch

    def consumed(self, batches):
        """`batches` (this loader's, on the devices), counting those the loop takes."""
        return _Counted(self, batches)

    def state_dict(self) -> dict:
        return {"batches": self.taken, "reader": self.shard, **self._states[self.taken]}

    def load_state_dict(self, state: dict) -> None:
        if list(state["reader"]) != self.shard:
            raise DataProblem(f"the checkpoint's stream position is reader {state['reader'][0]} of {state['reader'][1]}'s, "
                              f"this is reader {self.shard[0]} of {self.shard[1]}: resume with as many processes")
        self.done = self.taken = state["batches"]
        self.passes = state["pass"]
        self.stream.set_epoch(self.passes)
        if state["stream"] is not None:
            self.stream.load_state_dict(state["stream"])
        self._states = {self.done: {"pass": state["pass"], "stream": state["stream"]}}

    def save(self, folder: Path, reader: int) -> None:
        """This reader's position, as JSON, into a checkpoint folder."""
        (Path(folder) / STATE_FILE.format(reader)).write_text(json.dumps(self.state_dict()))

    def restore(self, folder: Path, reader: int) -> None:
        path = Path(folder) / STATE_FILE.format(reader)
        if not path.is_file():
            raise DataProblem(f"resume: {folder} holds no stream position for reader {reader} ({path.name}): it was "
                              "written without --streaming, or by fewer readers")
        self.load_state_dict(json.loads(path.read_text()))


class _Counted:
    def __init__(self, loader: StreamLoader, batches):
        self.loader, self.batches = loader, batches

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        loader = self.loader
        loader.taken = loader.done
        for batch in self.batches:
            loader.taken += 1
            for number in [n for n in loader._states if n < loader.taken]:
                del loader._states[number]
            yield batch
        if loader.taken < loader.steps:  # a device loader's thread that failed ends its batches early
            raise DataProblem(f"the train stream stopped after {loader.taken} of {loader.steps} batches (see above)")
