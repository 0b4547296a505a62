"""Host memory of a launch: proportional set size (Pss) summed over a process and all its children.

Pss splits every shared page between the processes that map it. Summed over the
notebook's process and its forked workers, a page they all share (copy-on-write after
a fork, or one copy in /dev/shm) counts once, and a page each worker made for itself
counts once per worker: the figure that runs out on a small host and ends in SIGSEGV
or SIGKILL. psutil reads it (Linux only: `memory_full_info().pss`) and walks the process
tree. The peak is found by sampling in a background thread while the launch runs.
"""

import os
import threading
import time
from dataclasses import asdict, dataclass

import psutil

SHM = "/dev/shm"
GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied)


def available() -> bool:
    return hasattr(psutil.Process().memory_full_info(), "pss")


def pss_bytes(pid: int) -> int | None:
    """The process's Pss, or None once it has exited (a worker may end between two reads)."""
    try:
        return psutil.Process(pid).memory_full_info().pss
    except GONE:
        return None


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants."""
    try:
        return [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except GONE:
        return [pid]


def shm_used_bytes(path: str = SHM) -> int | None:
    """Bytes in use on the shared-memory file system (where pickled tensors go), None without one."""
    try:
        return psutil.disk_usage(path).used
    except OSError:
        return None


@dataclass
class Peak:
    pss_bytes: int = 0
    processes: int = 0
    shm_bytes: int = 0
    samples: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


class PeakSampler:
    """Sample the tree under `pid` every `interval` seconds until stopped; keep the largest total.

    `shm_bytes` is /dev/shm usage above what it was when sampling started.
    """

    def __init__(self, pid: int | None = None, interval: float = 0.02):
        self.pid = pid or os.getpid()
        self.interval = interval
        self.peak = Peak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._shm_start = shm_used_bytes() or 0

    def sample(self) -> tuple[int, int]:
        """One reading: (total Pss in bytes, number of live processes); also updates the peak."""
        sizes = [size for size in map(pss_bytes, process_tree(self.pid)) if size is not None]
        total = sum(sizes)
        shm = max((shm_used_bytes() or 0) - self._shm_start, 0)
        peak = self.peak
        peak.samples += 1
        peak.shm_bytes = max(peak.shm_bytes, shm)
        if total > peak.pss_bytes:
            peak.pss_bytes, peak.processes = total, len(sizes)
        return total, len(sizes)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
