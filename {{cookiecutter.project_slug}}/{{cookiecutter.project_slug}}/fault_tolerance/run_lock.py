"""One run per output folder: a lock file in output_dir names the run that uses it.

Two runs in one folder (a notebook cell run twice, a launch repeated) would both train and write one metrics.jsonl
and one checkpoint folder; the second would fail at a save minutes later. The run's first process writes LOCK_FILE
(its host, process id, the process's start time, when the run started) and refreshes it every REFRESH_SECONDS from a
daemon thread; every process reads it first thing, so that a second run stops before it writes anything. A lock is
taken over when its process is gone (a pid that no longer runs, or one the system gave to another program: its
start time differs), or when it lives on another host and was not refreshed for STALE_SECONDS (a process on another
host cannot be asked).
"""

import json
import os
import threading
import time
from pathlib import Path

import psutil

from ..config import ConfigError
from ..launch.environment import local_rank
from ..launch.hosts import host_name, joined

LOCK_FILE = ".run-lock.json"
REFRESH_SECONDS = 60
STALE_SECONDS = 600  # ten refreshes missed: a host that is slow or behind on its clock is not taken as stopped


class FolderInUse(ConfigError):
    """Another run uses output_dir; every process of this run finds it and stops (cli.py says it once)."""

    every_process = True


def first_process() -> bool:
    """The process that takes the lock, known before any Accelerator or runtime: global rank 0 (torchrun, the
    notebook's forked workers) and local rank 0 (torch_xla's spawned workers have no RANK)."""
    return os.environ.get("RANK", "0") == "0" and local_rank() == "0"


def _started(pid: int) -> float | None:
    """The process's start time (seconds since the epoch), or None when it is not running."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else round(process.create_time(), 2)
    except psutil.Error:
        return None


class RunLock:
    """output_dir's lock: `check` in every process, `take` in the one that holds it, `release` when the run ends."""

    def __init__(self, output_dir):
        # Absolute: the refresh thread and the release find it even if the working folder changes meanwhile.
        self.folder, self.path = str(output_dir), Path(output_dir).absolute() / LOCK_FILE
        self.me = {"host": host_name(), "pid": os.getpid(), "process_started": _started(os.getpid())}
        self.held, self.deferred, self._stop, self._refresher = False, False, threading.Event(), None

    def _read(self) -> dict | None:
        """The lock's content; None when there is none. One being written is read again a moment later."""
        for _ in range(20):
            try:
                lock = json.loads(self.path.read_text())
                return lock if isinstance(lock, dict) else {}
            except FileNotFoundError:
                return None
            except (OSError, ValueError):
                time.sleep(0.05)
        return {}  # unreadable for a second: not a lock any run could hold

    def _judge(self, lock: dict) -> tuple[str, str]:
        """(what the lock is to this process, the line that says why it is taken over)."""
        host, pid = lock.get("host"), lock.get("pid")
        if not isinstance(pid, int) or not host:
            return "gone", f"replacing the unreadable lock {self.path}"
        whose = f"the lock of process {pid} on host {host}"
        if host != self.me["host"]:
            silent = time.time() - float(lock.get("refreshed") or 0)
            if silent <= STALE_SECONDS:
                return "elsewhere", ""
            return "gone", (f"taking over {whose}: not refreshed for {silent / 60:.0f} min (a run refreshes it every "
                            f"{REFRESH_SECONDS} s; after {STALE_SECONDS // 60} min it is taken as stopped)")
        started = _started(pid)
        if started is None:
            return "gone", f"taking over {whose}: that process is no longer running (a run that was killed)"
        if abs(started - float(lock.get("process_started") or 0)) > 0.05:
            return "gone", f"taking over {whose}: that process id now belongs to another program started later"
        if pid == self.me["pid"]:
            return "mine", ""  # a notebook that runs the function again after an interrupted call
        try:  # a worker started beside this one by the same launcher (torchrun, xmp.spawn, notebook_launcher)
            sibling = psutil.Process(pid).ppid() == os.getppid()
        except psutil.Error:
            sibling = False
        return ("sibling" if sibling else "live"), ""

    def _mine(self, lock: dict | None) -> bool:
        return bool(lock) and (lock.get("host"), lock.get("pid")) == (self.me["host"], self.me["pid"])

    def refusal(self, lock: dict) -> FolderInUse:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(lock.get("started") or 0)))
        return FolderInUse(
            f"output_dir={self.folder!r} is in use by another run: process {lock['pid']} on host {lock['host']}, "
            f"started {when} (its lock: {LOCK_FILE}). Wait for it to end or give another --output_dir "
            f"(--overwrite_output_dir does not stop a running run). A lock whose process has ended is taken over; "
            f"one on another host once not refreshed for {STALE_SECONDS // 60} min (a run refreshes it every "
            f"{REFRESH_SECONDS} s)"
        )

    def check(self, hosts_may_share: bool) -> None:
        """Every process, before it writes anything: stop if another run holds the folder. A fresh lock on another
        host may be this run's own when the run may span hosts (a pod): its first host decides (`take`)."""
        lock = self._read()
        if lock is None:
            return
        kind, _ = self._judge(lock)
        if kind == "live" or (kind == "sibling" and first_process()) or (kind == "elsewhere" and not hosts_may_share):
            raise self.refusal(lock)

    def take(self, hosts_may_share: bool = False) -> None:
        """Write the lock, or take over one whose run is gone; FolderInUse when a live run holds it."""
        record = {**self.me, "started": time.time()}
        for _ in range(3):
            try:
                with open(self.path, "x") as file:  # created only if absent: two runs starting at once, one wins
                    json.dump({**record, "refreshed": time.time()}, file)
            except FileExistsError:
                lock = self._read()
                if lock is None:
                    continue  # its run ended just now: create it again
                kind, said = self._judge(lock)
                if kind == "elsewhere" and hosts_may_share:
                    return  # another host of this pod took it first
                if kind in ("live", "sibling", "elsewhere"):
                    raise self.refusal(lock) from None
                if said:
                    print(f"output_dir={self.folder!r}: {said}", flush=True)
                self._write(record)
                if not self._mine(self._read()):
                    continue  # another run took it over at the same moment: judge its lock
            self.held = True
            self._refresher = threading.Thread(target=self._refresh, args=(record,), daemon=True, name="run-lock")
            self._refresher.start()
            return
        raise self.refusal(self._read() or {"pid": "?", "host": "?"})

    def _write(self, record: dict) -> None:
        """Replace the lock whole (readers never see half a file)."""
        partial = self.path.with_name(f"{LOCK_FILE}.{os.getpid()}.partial")
        partial.write_text(json.dumps({**record, "refreshed": time.time()}))
        os.replace(partial, self.path)

    def _refresh(self, record: dict) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            try:
                if not self._mine(self._read()):
                    return  # taken over (this host was silent too long): the lock is the other run's now
                self._write(record)
            except OSError:
                pass  # a folder briefly out of reach (a network mount): the next refresh tries again

    def take_on_first_host(self) -> None:
        """fsdp, once the hosts are known: host 0 takes the lock and tells the others whether the folder is free."""
        if not self.deferred:
            return
        host = joined()
        refused = None
        if host is None or host.is_first:
            try:
                self.take()
            except FolderInUse as error:
                refused = str(error)
        if host is not None:
            import torch.distributed as dist

            answer = [refused]
            dist.broadcast_object_list(answer, src=0)  # the hosts' gloo group: host memory, no device work
            refused = answer[0]
        if refused:
            raise FolderInUse(refused)

    def release(self) -> None:
        """Remove the lock, if this run still holds it (also after an error, a Ctrl-C or a preemption)."""
        self._stop.set()
        if self._refresher is not None:
            self._refresher.join(timeout=10)  # not in the middle of a refresh, which would write the lock again
        if self.held and self._mine(self._read()):
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
