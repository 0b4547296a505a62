"""Data at size: a real corpus of 1, 50 and 200 MB prepared for training, the project's way against transformers'
example script{{ " and TRL's packing" if cookiecutter.task == "causal-lm" else "" }}: seconds, real tokens per second, peak host memory, the project's second run.

The corpus is made at run time, never shipped: the Python source files of this environment's site-packages (sysconfig's
purelib), shuffled with a fixed seed, files over 1 MB (generated tables) left out, taken again from the start only if
the environment holds less than a size asks for (`corpus_repeats`).
{%- if cookiecutter.task == "causal-lm" %}
Train file: JSON lines, one whole source file a line ({"text": ...}), until the file is `size` bytes long.
{%- else %}
Train file: CSV of consecutive 500-character snippets of the source files (`text`, blank ones left out) with `label` 1
when the snippet comes from a test module (a tests/test/testing folder, test_*.py or *_test.py), else 0.
{%- endif %}
Eval file: its own, from the files after the training ones: 1 % of the size, at least 20 kB.
Model folder (--model_name_or_path): a byte-level BPE trained with `tokenizers` to 32000 tokens on 5 MB of the corpus,
wrapped in transformers' PreTrainedTokenizerFast{{ " (EOS and pad tokens), with a tiny Qwen2" if cookiecutter.task == "causal-lm" else " ([CLS] text [SEP], with pad, unk and mask), with a tiny BERT" }} of vocabulary 32000, saved with
save_pretrained; built once a session.

Rows, each in a fresh process forked from the benchmark session (its libraries loaded, as in isolation.py; the inherited
objects frozen out of the garbage collector's reach, see row_in_child), one after the other, each with 2 workers and
max_seq_length 128, each on a fresh HF_DATASETS_CACHE:
{%- if cookiecutter.task == "causal-lm" %}
  example-pipeline   run_clm.py's preparation: load_dataset("json"), map(tokenize, batched, num_proc=2,
                     remove_columns), map(group_texts, batched, num_proc=2) into blocks of 128 (each map batch of 1000
                     texts is joined and its remainder dropped; no EOS between texts)
  trl-pack-bfd       the same tokenization, then TRL's pack_dataset(seq_length=128) with its default strategy, bfd
                     (best fit decreasing: a text longer than 128 tokens is cut, the rest of it dropped)
  trl-pack-wrapped   the same with strategy="wrapped" (joined and cut, as run_clm's group_texts)
  project            the project's tasks.load_examples (TrainConfig(dataset="files", preprocessing_num_workers=2)):
                     every text and its EOS joined and cut into blocks of 128, the short last one dropped; then
                     `second_run_seconds`: the same again in another fresh process on the same cache
  project-streaming  load_examples with streaming=True (data/streaming.py): the eval set prepared as above, then one
                     pass over the train file's stream of packed blocks (tokenized and cut as they are read, each run
                     of 1000 texts on its own, in the one process that reads it: one reader), counted as they come;
                     `first_block_seconds`: from the call to the first block. (Skipped, saying so, while TrainConfig
                     has no `streaming` field.)
{%- else %}
  example-pipeline   run_glue.py's preparation: load_dataset("csv"), map(tokenizer(text, padding="max_length",
                     max_length=128, truncation=True), batched, num_proc=2)
  project            the project's tasks.load_examples (TrainConfig(dataset="files", preprocessing_num_workers=2)); then
                     `second_run_seconds`: the same again in another fresh process on the same cache
{%- endif %}
Both the train and the eval file are prepared in every row; the seconds are the preparation's, inside the process
(from the call to the prepared data sets), the forking and the counting after it left out. Tokens are the prepared
train set's real ones: its attention mask summed (all ones in packed blocks). Progress bars are off in every row, and
the session's TOKENIZERS_PARALLELISM=false (conftest.py) holds in each: every worker tokenizes on one thread.

Memory: the row's process and every datasets worker it starts, read on a thread of the benchmark session and summed
over the tree, the peak kept: `peak_uss_bytes`, the pages that only the tree holds (what the preparation made: its
heap, copied-on-write pages, Arrow files only it maps), `peak_heap_bytes`, the written pages of those that no file
backs (the heap and the pages copied on write; Uss also counts the cache files the row has just written and maps,
dirty page cache until the kernel writes it back: the figure a larger corpus must not grow), and `peak_pss_bytes`, Uss plus its share of the pages it shares, chiefly the
session's libraries, inherited by the fork. Every 50 ms the tree's Rss is read (cheap, and no
measure of its own: each forked worker counts the inherited libraries again); Uss and Pss (psutil's memory_full_info:
a walk of each process's page tables, 10-30 ms for a process with the session's libraries) whenever that Rss is at a
new high or a second has passed, at most a fifth of a core's time, so that the readings leave the workers' cores
alone (`memory_readings` counts them).
"""

{%- if cookiecutter.task == "causal-lm" %}
import itertools
import json
import os
import random
import re
import sysconfig
import threading
import time
from dataclasses import fields, replace
from pathlib import Path
{%- else %}
import csv
import itertools
import os
import random
import re
import sysconfig
import threading
import time
from dataclasses import fields
from pathlib import Path
{%- endif %}

import psutil

from {{ cookiecutter.project_slug }}.config import TrainConfig

from . import isolation

SIZES = {"1MB": 10**6, "50MB": 50 * 10**6, "200MB": 200 * 10**6}
{%- if cookiecutter.task == "causal-lm" %}
ROWS = ("example-pipeline", "trl-pack-bfd", "trl-pack-wrapped", "project", "project-streaming")
QUICK_ROWS = ("example-pipeline", "trl-pack-bfd", "project")  # the quick profile's: the group within 30 s on 2 cores
{%- else %}
ROWS = ("example-pipeline", "project")
QUICK_ROWS = ROWS
{%- endif %}
EVAL_SHARE, EVAL_LEAST = 0.01, 20_000
LARGEST_FILE = 10**6
SNIPPET = 500
VOCAB_SIZE = 32000
TOKENIZER_BYTES = 5 * 10**6
LENGTH = 128
WORKERS = 2
SAMPLE_S = 0.05
MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")  # a mapping's first line in /proc/PID/smaps
SAMPLER_SHARE = 0.2  # at most this share of a core for the memory readings
TIMEOUT_S = 3600
# What the rows import, loaded once in the session (preload) for every forked row to inherit.
{%- if cookiecutter.task == "causal-lm" %}
PRELOAD = ("{{ cookiecutter.project_slug }}.tasks", "datasets.packaged_modules.json.json", "trl.data_utils")
{%- else %}
PRELOAD = ("{{ cookiecutter.project_slug }}.tasks", "datasets.packaged_modules.csv.csv")
{%- endif %}
GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)
TEST_FOLDERS = {"tests", "test", "testing"}


def site_packages() -> list[Path]:
    return sorted({Path(sysconfig.get_paths()[name]) for name in ("purelib", "platlib")})


def source_files() -> list[Path]:
    """This environment's .py files (site-packages), in a fixed shuffled order."""
    paths = sorted(path for root in site_packages() for path in root.rglob("*.py") if path.is_file())
    random.Random(0).shuffle(paths)
    return paths


def documents(paths):
    """(path, text, repeat) of every usable file (UTF-8, not blank, no NUL, at most LARGEST_FILE), again and again."""
    for repeat in itertools.count():
        found = False
        for path in paths:
            try:
                if path.stat().st_size > LARGEST_FILE:
                    continue
                text = path.read_text(encoding="utf-8")  # universal newlines: \r\n and \r become \n
            except (OSError, UnicodeDecodeError):
                continue
            if text.strip() and "\x00" not in text:
                found = True
                yield path, text, repeat
        if not found:
            raise RuntimeError("no usable .py file in site-packages to build a corpus from")


def is_test_module(path: Path, roots: list[Path]) -> bool:
    """Whether a source file is a test module, from its path inside site-packages."""
    folders = next((path.relative_to(root).parts[:-1] for root in roots if path.is_relative_to(root)), ())
    return bool(TEST_FOLDERS & set(folders)) or path.name.startswith("test_") or path.name.endswith("_test.py")


def _records(path: Path, text: str):
    """The corpus's rows from one source file."""
{%- if cookiecutter.task == "causal-lm" %}
    yield {"text": text}
{%- else %}
    label = int(is_test_module(path, site_packages()))
    for start in range(0, len(text), SNIPPET):
        snippet = text[start:start + SNIPPET]
        if snippet.strip():
            yield {"text": snippet, "label": label}
{%- endif %}


class _Writer:
{%- if cookiecutter.task == "causal-lm" %}
    """JSON lines, one record a line."""

    SUFFIX = ".jsonl"

    def __init__(self, handle):
        self.handle = handle

    def write(self, record: dict) -> None:
        self.handle.write(json.dumps(record, ensure_ascii=False) + "\n")
{%- else %}
    """CSV with a header, text and label."""

    SUFFIX = ".csv"

    def __init__(self, handle):
        self.writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        self.writer.writeheader()

    def write(self, record: dict) -> None:
        self.writer.writerow(record)
{%- endif %}


def write_corpus(folder: Path, size: str) -> dict:
    """The train file of SIZES[size] bytes (at least) and its eval file, from the files after the training ones."""
    folder.mkdir(parents=True, exist_ok=True)
    targets = {"train": SIZES[size], "eval": max(EVAL_LEAST, int(SIZES[size] * EVAL_SHARE))}
    facts, texts = {}, documents(source_files())
    for split, target in targets.items():
        path = folder / f"{split}{_Writer.SUFFIX}"
        rows = 0
        with path.open("w", encoding="utf-8", newline="") as handle:
            writer = _Writer(handle)
            while handle.tell() < target:
                source, text, repeat = next(texts)
                for record in _records(source, text):
                    writer.write(record)
                    rows += 1
        facts.update({f"{split}_file": str(path), f"{split}_file_bytes": path.stat().st_size, f"{split}_file_rows": rows})
    facts["corpus_repeats"] = repeat
    return facts


def build_model_folder(folder: str) -> dict:
    """The tokenizer (byte-level BPE, VOCAB_SIZE) and a tiny model, saved with save_pretrained (in a forked child)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers{{ "" if cookiecutter.task == "causal-lm" else ", processors" }}, trainers
    from transformers import PreTrainedTokenizerFast

    sample, taken = [], 0
    for _, text, _ in documents(source_files()):
        sample.append(text)
        taken += len(text.encode())
        if taken >= TOKENIZER_BYTES:
            break
{%- if cookiecutter.task == "causal-lm" %}
    specials = {"eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}
{%- else %}
    specials = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                "mask_token": "[MASK]"}
{%- endif %}
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(sample, trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=list(specials.values()), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
{%- if cookiecutter.task == "causal-lm" %}
    from transformers import Qwen2Config, Qwen2ForCausalLM

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        eos_token_id=wrapped.eos_token_id, pad_token_id=wrapped.pad_token_id,
    ))
{%- else %}
    from transformers import BertConfig, BertForSequenceClassification

    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=512, **specials)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=512, num_labels=2, pad_token_id=wrapped.pad_token_id,
    ))
{%- endif %}
    wrapped.save_pretrained(folder)
    model.save_pretrained(folder)
    return {"tokenizer_vocab": len(wrapped), "tokenizer_trained_on_bytes": taken}


def has_streaming() -> bool:
    """Whether the project's TrainConfig can stream its data yet (the project-streaming row needs it)."""
    return "streaming" in {field.name for field in fields(TrainConfig)}


# ---- in the row's process ----------------------------------------------------------------------------------------


def real_tokens(dataset) -> int:
    """The data set's real tokens: its attention mask summed, else its ids counted."""
    import pyarrow.compute as pc

    table = dataset.with_format("arrow")[:]
    if "attention_mask" in table.column_names:
        return int(pc.sum(pc.list_flatten(table.column("attention_mask"))).as_py() or 0)
    return int(pc.sum(pc.list_value_length(table.column("input_ids"))).as_py() or 0)


def _files(job: dict) -> dict:
    return {"train": job["train_file"], "validation": job["eval_file"]}


def _tokenizer(job: dict):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(job["model"])


def project_config(job: dict) -> TrainConfig:
    return TrainConfig(
        demo=False, dataset="files", train_file=job["train_file"], eval_file=job["eval_file"],
        model_name_or_path=job["model"], max_seq_length=LENGTH, preprocessing_num_workers=WORKERS,
    )


def _project(job: dict) -> tuple:
    from {{ cookiecutter.project_slug }}.tasks import task

    _, _, train, evaluation = task.load_examples(project_config(job), demo=False)
    return train, evaluation
{%- if cookiecutter.task == "causal-lm" %}


def _tokenized(job: dict):
    """run_clm.py's tokenization: every text's ids (no special tokens here: the tokenizer adds none), in workers."""
    from datasets import load_dataset

    tokenizer = _tokenizer(job)
    raw = load_dataset("json", data_files=_files(job))
    return raw.map(lambda rows: tokenizer(rows["text"]), batched=True, num_proc=WORKERS,
                   remove_columns=raw["train"].column_names)


def group_texts(rows: dict) -> dict:
    """run_clm.py's group_texts: a batch of texts joined and cut into blocks of LENGTH, its remainder dropped."""
    joined = {name: list(itertools.chain(*values)) for name, values in rows.items()}
    total = len(joined["input_ids"]) // LENGTH * LENGTH
    blocks = {name: [values[start:start + LENGTH] for start in range(0, total, LENGTH)] for name, values in joined.items()}
    blocks["labels"] = blocks["input_ids"].copy()
    return blocks


def _example_pipeline(job: dict) -> tuple:
    tokenized = _tokenized(job)
    grouped = tokenized.map(group_texts, batched=True, num_proc=WORKERS)
    return grouped["train"], grouped["validation"], tokenized["train"]


def _trl_pack(job: dict, strategy: str) -> tuple:
    from trl import pack_dataset

    tokenized = _tokenized(job)
    packed = pack_dataset(tokenized, LENGTH, strategy=strategy, map_kwargs={"num_proc": WORKERS})
    return packed["train"], packed["validation"], tokenized["train"]


def _project_streaming(job: dict) -> dict:
    """One pass over the project's streamed train set (TrainConfig.streaming): its blocks counted as they come."""
    from {{ cookiecutter.project_slug }}.tasks import task

    started = time.perf_counter()
    config = project_config(job)
    # The stream is one pass over the train file; max_steps only has to be given (a stream has no length).
    config = replace(config, streaming=True, max_steps=1)
    _, _, train, evaluation = task.load_examples(config, demo=False)
    blocks = tokens = 0
    first = None
    for block in train:
        first = first or time.perf_counter() - started
        blocks += 1
        tokens += int(sum(block["attention_mask"]))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "first_block_seconds": first, "train_rows": blocks, "train_tokens": tokens,
            "eval_rows": len(evaluation), "readers": 1, "tokens_per_second_per_reader": tokens / seconds}
{%- else %}


def _example_pipeline(job: dict) -> tuple:
    """run_glue.py's preparation: every text tokenized, truncated and padded to LENGTH, in workers."""
    from datasets import load_dataset

    tokenizer = _tokenizer(job)
    raw = load_dataset("csv", data_files=_files(job))

    def preprocess(rows):
        result = tokenizer(rows["text"], padding="max_length", max_length=LENGTH, truncation=True)
        result["label"] = rows["label"]
        return result

    prepared = raw.map(preprocess, batched=True, num_proc=WORKERS)
    return prepared["train"], prepared["validation"], None
{%- endif %}


def _prepare(job: dict) -> tuple:
    row = job["row"]
    if row == "project":
        return (*_project(job), None)
{%- if cookiecutter.task == "causal-lm" %}
    if row.startswith("trl-pack-"):
        return _trl_pack(job, row.removeprefix("trl-pack-"))
{%- endif %}
    return _example_pipeline(job)


def _cached(prepared, since: float) -> bool:
    """Whether every prepared data set was read from cache files written before `since`."""
    files = [entry["filename"] for dataset in prepared for entry in dataset.cache_files]
    return bool(files) and all(os.path.getmtime(name) < since for name in files)


def row_in_child(job: dict) -> dict:
    """One row's preparation, timed, and what it prepared (run in a fresh process), on a thread of its own: from an
    empty Python stack, as a script's main code runs. (CPython 3.11 maps its frame stack in 16 kB chunks and unmaps
    one each time a deep recursion, dill hashing a tokenizer for datasets' cache key, steps back over a chunk's edge:
    under the ~100 frames of pytest that the fork keeps, the same hashing took seconds more, in 300000 mmap calls.)"""
    import gc

    import datasets

    # The inherited objects out of the collector's reach: a full collection would touch every one of them, copying
    # the session's heap page by page (copy-on-write), seconds and hundreds of MB that a process of its own never pays.
    gc.freeze()
    cache = Path(job["cache"])
    os.environ["HF_DATASETS_CACHE"] = str(cache)
    datasets.config.HF_DATASETS_CACHE = cache  # read when a data set is loaded, not only at import
    datasets.config.DOWNLOADED_DATASETS_PATH = cache / datasets.config.DOWNLOADED_DATASETS_DIR
    datasets.config.EXTRACTED_DATASETS_PATH = cache / datasets.config.EXTRACTED_DATASETS_DIR
    datasets.disable_progress_bars()
    outcome = {}

    def run() -> None:
        try:
            outcome["figures"] = _timed(job)
        except BaseException as error:  # raised again below, on the process's main thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"row {job['row']}")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["figures"]


def _timed(job: dict) -> dict:
{%- if cookiecutter.task == "causal-lm" %}
    if job["row"] == "project-streaming":
        return _project_streaming(job)
{%- endif %}
    since, started = time.time(), time.perf_counter()
    train, evaluation, tokenized = _prepare(job)
    seconds = time.perf_counter() - started
    figures = {"seconds": seconds, "train_rows": len(train), "train_tokens": real_tokens(train),
               "eval_rows": len(evaluation), "from_cache": _cached((train, evaluation), since)}
    if tokenized is not None:  # the texts' tokens before they were cut into blocks
        figures.update(tokens_before_packing=real_tokens(tokenized), texts=len(tokenized))
    return figures


# ---- in the benchmark session ------------------------------------------------------------------------------------


def preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


class TreeMemory:
    """The peaks of Uss and Pss summed over a process and its descendants, read on a thread (see the docstring)."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.peaks = {"peak_uss_bytes": 0, "peak_pss_bytes": 0, "peak_heap_bytes": 0, "peak_processes": 0,
                      "memory_readings": 0}
        self.rss_read, self.next_reading, self.last_reading = 0, 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _tree(self) -> list:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except GONE:
            return []

    def sample(self) -> None:
        """The tree's Rss (cheap); a full reading when it is at a new high or a second has passed, as the cap allows."""
        tree, now = self._tree(), time.perf_counter()
        rss = sum(_read(process.memory_info, "rss") for process in tree)
        if now < self.next_reading or (rss <= self.rss_read and now - self.last_reading < 1):
            return
        uss = pss = dirty = count = 0
        for process in tree:
            info = _read(process.memory_full_info)
            if info:
                uss, pss, dirty, count = uss + info.uss, pss + info.pss, dirty + private_anonymous(process.pid), count + 1
        peaks, cost = self.peaks, time.perf_counter() - now
        self.rss_read, self.last_reading, self.next_reading = rss, now, now + cost / SAMPLER_SHARE
        peaks["memory_readings"] += 1
        peaks["peak_pss_bytes"] = max(peaks["peak_pss_bytes"], pss)
        peaks["peak_processes"] = max(peaks["peak_processes"], count)
        peaks["peak_uss_bytes"] = max(peaks["peak_uss_bytes"], uss)
        peaks["peak_heap_bytes"] = max(peaks["peak_heap_bytes"], dirty)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def __enter__(self) -> "TreeMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def private_anonymous(pid: int) -> int:
    """The process's own written memory that no file backs: its heap (Python's, Arrow's, the tokenizer's) and the
    pages it copied on write. Uss also counts a file it just wrote and maps (datasets' cache files): their pages stay
    dirty until the kernel writes them back, grow with the corpus, and are page cache, not the process's memory."""
    total, anonymous = 0, False
    try:
        with open(f"/proc/{pid}/smaps") as lines:
            for line in lines:
                if MAPPING.match(line):
                    where = line.split(maxsplit=5)[5:]
                    anonymous = not where or where[0].startswith("[")  # no file: [heap], [stack], [anon:...]
                elif anonymous and line.startswith("Private_Dirty:"):
                    total += int(line.split()[1]) * 1024
    except OSError:  # gone
        return 0
    return total


def _read(method, name: str | None = None):
    """psutil's reading of a process, or 0 once it has exited (a worker may end between two readings)."""
    try:
        value = method()
    except GONE:
        return 0
    return getattr(value, name) if name else value


def measure(row: str, corpus: dict, model: str, cache: Path) -> dict:
    """One row in a fresh process (forked, as isolation.run does), its process tree's memory sampled from here."""
    cache.mkdir(parents=True, exist_ok=True)
    job = {"row": row, "train_file": corpus["train_file"], "eval_file": corpus["eval_file"], "model": model,
           "cache": str(cache)}
    process, receive = isolation._start(row_in_child, (job,))
    with TreeMemory(process.pid) as memory:
        if not receive.poll(TIMEOUT_S):
            process.kill()
            process.join(timeout=60)
            raise isolation.ChildFailed(f"{row} gave no answer in {TIMEOUT_S} s")
        result = isolation._answer(process, receive)
    if isinstance(result, isolation.ChildFailed):
        raise result
    result["tokens_per_second"] = result["train_tokens"] / result["seconds"] if result["seconds"] else None
    return {**result, **memory.peaks}
