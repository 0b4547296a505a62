"""The run's output folder: refused while another run uses it (run_lock.py) and when an earlier run used it (unless
this run resumes it or starts over), and removed again when this run made it and was refused while being set up.
"""

import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from ..config import ConfigError
from ..config.groups import CheckpointOptions, ParallelismOptions
from ..data.formats import DataProblem
from ..data.hub import ModelUnavailable
from ..launch.environment import local_rank
from ..launch.main_process import StoppedByTheMainProcess
from ..xla import runtime
from .checkpointing import check_writable
from .run_lock import RunLock, first_process

# What an earlier run leaves that a new one would overwrite or keep beside its own. The compilation analysis
# (xla-compilations/) and cache (xla-cache/) are not a run's results: each run writes its own log afresh.
EARLIER_RUN = ("checkpoints", "metrics.jsonl", "report.json", "model")  # checkpoints: checkpointing.checkpoint_root
# What --overwrite_output_dir removes: every result of a run.
RUN_OUTPUTS = (*EARLIER_RUN, "model-merged", "best-model", "curves.png", "confusion.png", "tensorboard", "profile")


def claim(options: CheckpointOptions, parallel: ParallelismOptions, lock: RunLock) -> bool:
    """Check output_dir before anything is written; True when it was not there (this run makes it).

    First the lock, read by every process: a folder that another run is using is refused, --overwrite_output_dir or
    not. The first process takes it once the folder is known writable; under fsdp, where every host's process looks
    first until the hosts are known, host 0 takes it then (`RunLock.take_on_first_host`).

    A second run into a used folder without --resume would overwrite metrics.jsonl and leave the earlier run's
    checkpoints beside its own (and --keep_checkpoints would count them): it is refused, naming the flags. With
    --overwrite_output_dir, each host's first process removes the earlier run's results; the other processes
    wait for it at the rendezvous that follows, before anything of this run is written.
    """
    hosts_may_share = parallel.parallelism == "fsdp" or os.environ.get("PJRT_DEVICE", "").upper() == "TPU"  # a pod
    lock.check(hosts_may_share)
    folder = Path(options.output_dir)
    found = [name for name in EARLIER_RUN if (folder / name).exists()]
    if found and not options.resume:
        if not options.overwrite_output_dir:
            raise ConfigError(
                f"output_dir={options.output_dir!r} holds an earlier run ({', '.join(found)}): --resume continues it, "
                "--overwrite_output_dir starts over (removes its results), or give another --output_dir"
            )
        if local_rank() == "0":
            for name in RUN_OUTPUTS:
                path = folder / name
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
    made = check_writable(folder, options.report_path)
    if parallel.parallelism == "fsdp" or runtime.one_process_sees_several_chips():  # one process per host (SPMD)
        lock.deferred = True  # every host's process looks first until the hosts are known
    elif first_process():
        lock.take(hosts_may_share)
    return made


@contextmanager
def removed_if_refused(output_dir, made_here: bool):
    """A run refused while it is set up (a value, its data or its model) leaves no output folder that it made: the
    folder holds only torch_xla's compilation analysis log by then. Whichever process made it removes it: under
    several processes that may be one the main process's refusal stopped (launch/main_process.py)."""
    try:
        yield
    except (ConfigError, DataProblem, ModelUnavailable, StoppedByTheMainProcess):
        if made_here:
            shutil.rmtree(output_dir, ignore_errors=True)
        raise
