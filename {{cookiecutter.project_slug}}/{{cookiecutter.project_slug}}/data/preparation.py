"""How examples are prepared: datasets' batched map in worker processes, cached on disk for the next run.

`datasets` keys each map's result by its input's fingerprint and a hash of the function and its arguments (the
tokenizer, max_seq_length, the task's columns), and writes it beside the loaded data in its cache
(~/.cache/huggingface/datasets, or HF_DATASETS_CACHE). The main process prepares first; the run's other processes,
and the next run on the same data, read what it wrote (loop/preparation.py).
"""

import os
import time

MOST_WORKERS = 8  # the default's cap: a v5e host has 224 cores, and a worker each would mostly wait on the disk
# Starting a worker process costs about a second (imports, the tokenizer sent over): below this many rows a
# worker, one process does it all.
ROWS_PER_WORKER = 5000
# Rows one tokenizing call (and one write to the cache) holds in Python. A row may be a whole document: a batch of 1000
# (datasets' default) held some 600 MB of Python lists and tokenizer encodings per worker on source files (8 kB a
# row); 100 rows keep it near 60 MB.
ROWS_PER_BATCH = 100


def workers(configured: int | None) -> int:
    """--preprocessing_num_workers, else the cores this process may use, at most MOST_WORKERS."""
    return configured or min(len(os.sched_getaffinity(0)), MOST_WORKERS)


def processes(configured: int | None, rows: int) -> int | None:
    """datasets' num_proc for a map over `rows` rows: None (in this process) when workers would not pay."""
    count = min(workers(configured), rows // ROWS_PER_WORKER)
    return count if count > 1 else None


def from_cache(prepared, since: float) -> bool:
    """Whether every prepared data set was read from cache files written before `since` (time.time())."""
    files = [entry["filename"] for dataset in prepared for entry in dataset.cache_files]
    return bool(files) and all(os.path.getmtime(name) < since for name in files)


def timed(prepare):
    """prepare()'s result, its seconds, and whether its train and eval sets (the last two) came from the cache."""
    since, started = time.time(), time.perf_counter()
    result = prepare()
    return result, time.perf_counter() - started, from_cache(result[-2:], since)
