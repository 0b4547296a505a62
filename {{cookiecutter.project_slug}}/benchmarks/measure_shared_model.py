"""Is the guide's memory claim true? Host memory of N forked workers, model shared or built in each.

Each pattern runs in its own process (forked from the benchmark session, which
plays the notebook's kernel), which builds or not, launches N workers and samples the Pss of
itself plus every worker (see {{ cookiecutter.project_slug }}/memory.py). A worker only
receives or builds the model and reads every weight (what the memory claim is about);
then it waits until all N hold theirs, so the peak has them all alive at once.

Patterns:
  baseline        N workers, no model: the launch's own cost, subtracted from the others
  per-worker      the model built inside each worker (shared_model=no)
  shared-fork     built once, passed through notebook_launcher's fork (CPU/GPU path):
                  copy-on-write pages, nothing pickled
  shared-pickled  built once, passed the way xmp.spawn does on a TPU runtime
                  (torch_xla/_internal/pjrt.py: a fork ProcessPoolExecutor whose tasks
                  are pickled, so the weights move into shared memory, /dev/shm). The
                  pool forks its workers before it pickles the first task, so they also
                  inherit the original pages: expect about two copies, whatever N.
"""

import functools
import math
import os
import socket
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from {{ cookiecutter.project_slug }}.watch import memory

from .profiles import Profile
from .workload import build, config_for

PATTERNS = ("baseline", "per-worker", "shared-fork", "shared-pickled")
TRANSPORT = {
    "baseline": "none",
    "per-worker": "built in each worker",
    "shared-fork": "fork, copy-on-write pages",
    "shared-pickled": "pickled into shared memory (/dev/shm)",
}
# BERT-base built from scratch (110M parameters, 0.44 GB): its weights dominate a worker's memory.
MODEL = "bert-base"
HOLD_S = 0.5  # every worker holds its model this long after the last one is ready: 25 samples
READY_TIMEOUT_S = 600


def _build(model_name: str, profile: Profile):
    return build(model_name, config_for(profile), vocab_size=0)


def hold(model, build_args, ready_dir: str, workers: int, rank: int | None = None) -> float:
    """One worker: get the model (received, or built from build_args), read every weight, wait for the others."""
    rank = int(os.environ.get("LOCAL_RANK", "0")) if rank is None else rank
    if model is None and build_args is not None:
        model = _build(*build_args)
    checksum = 0.0
    if model is not None:
        with torch.no_grad():
            # In place, in float32: a converted copy would be memory the claim is not about.
            checksum = sum(float(parameter.sum()) for parameter in model.parameters())
    folder = Path(ready_dir)
    (folder / f"ready-{rank}").touch()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(list(folder.glob("ready-*"))) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {rank}: the other workers never got ready")
        time.sleep(0.01)
    time.sleep(HOLD_S)
    return checksum


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def launch(pattern: str, workers: int, model_name: str, profile: Profile) -> dict:
    """Run one pattern in this process (the 'notebook'); return its peak memory."""
    from accelerate import notebook_launcher

    build_args = (model_name, profile)
    with tempfile.TemporaryDirectory() as ready_dir, memory.PeakSampler() as sampler:
        started = time.perf_counter()
        model = _build(*build_args) if pattern.startswith("shared") else None
        if pattern == "shared-pickled":
            context = torch.multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                task = functools.partial(hold, model, None, ready_dir, workers)
                checksums = list(pool.map(task, range(workers)))
            assert all(math.isclose(value, checksums[0], rel_tol=1e-6) for value in checksums), checksums
        else:
            worker_build = build_args if pattern == "per-worker" else None
            notebook_launcher(
                hold, (model, worker_build, ready_dir, workers), num_processes=workers, use_port=_free_port()
            )
        seconds = time.perf_counter() - started
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) if model is not None else None
    return {**sampler.peak.as_dict(), "seconds": seconds, "model_bytes": model_bytes}


def in_fresh_process(function, *args):
    """function(*args) in a process forked from this one, which (unlike a daemon) may fork workers itself."""
    with ProcessPoolExecutor(max_workers=1, mp_context=torch.multiprocessing.get_context("fork")) as pool:
        return pool.submit(function, *args).result()


def measure(workers: int, profile: Profile) -> dict:
    """Every pattern for N workers, each in a fresh forked process, and how they compare."""
    if not memory.available():
        raise RuntimeError("needs Linux's /proc/<pid>/smaps_rollup")
    runs = {pattern: in_fresh_process(launch, pattern, workers, MODEL, profile) for pattern in PATTERNS}
    model_bytes = runs["shared-fork"]["model_bytes"]
    baseline = runs["baseline"]["pss_bytes"]
    info = {
        "device": "cpu (host memory)",
        "model": MODEL,
        "workers": workers,
        "model_bytes": model_bytes,
        "sharing_strategy": torch.multiprocessing.get_sharing_strategy(),
        "baseline_pss_bytes": baseline,
    }
    for pattern in PATTERNS[1:]:
        run = runs[pattern]
        key = pattern.replace("-", "_")
        info[f"{key}_pss_bytes"] = run["pss_bytes"]
        # Model-sized copies held at the peak, net of the launch's own cost.
        info[f"{key}_model_copies"] = (run["pss_bytes"] - baseline) / model_bytes
        info[f"{key}_shm_bytes"] = run["shm_bytes"]
        info[f"{key}_processes"] = run["processes"]
        info[f"{key}_transport"] = TRANSPORT[pattern]
    for shared in ("shared_fork", "shared_pickled"):
        info[f"per_worker_over_{shared}"] = info["per_worker_pss_bytes"] / info[f"{shared}_pss_bytes"]
        info[f"per_worker_over_{shared}_net"] = info["per_worker_model_copies"] / info[f"{shared}_model_copies"]
    return info
