"""What the processes of a run agree on: barriers, sums, gathers, one voice (main_process.py: the main process's work).

Each helper is a no-op for a lone process, where the collective would only compile a rendezvous graph.

Two kinds of "processes": decisions, barriers and host objects are the job's, which under SPMD on several
hosts (fsdp on a pod) are the hosts (hosts.py: Accelerate sees one process per host there, each its main
one); sums and gathers of device tensors are Accelerate's, because under SPMD the graph already spans
every host's chips.
"""

import os
import sys
import time

from ..xla import runtime
from . import hosts, library_noise


def wait_for_forked_siblings(timeout: float = 60.0) -> None:
    """In one of several local workers on the CPU or GPUs (not XLA), wait until the launcher has started all of them,
    before this one connects to the rendezvous (at most `timeout` seconds, then go on).

    Why: Accelerate's notebook_launcher forks the workers (start_method "fork") from the notebook's own process, where
    torch elastic's store serves the rendezvous from a thread, and c10d's formatSockAddr calls getnameinfo (glibc's
    resolver lock) for every connection that thread accepts (pytorch/pytorch#159007). A worker forked while the thread
    holds the lock inherits it held and hangs in its own connection's getnameinfo, and the other workers wait for it in
    gloo's connectFullMesh (the same glibc mechanism: resque/resque#1630). Once every worker is forked, no fork can
    copy the lock. The template's tools/gloo_startup_stress.py reproduced it: 8 hangs in 870 4-process start-ups on 2
    cores without this wait, none in 832 with it. Workers that a launcher spawns (torchrun) wait a moment for nothing.
    """
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local < 2 or os.environ.get("PJRT_DEVICE"):
        return
    import psutil

    launcher, deadline = psutil.Process(os.getppid()), time.monotonic() + timeout
    while len(launcher.children()) < local and time.monotonic() < deadline:
        time.sleep(0.05)


def is_main(accelerator) -> bool:
    """The one process of the job that writes its shared files: host 0's under SPMD on several hosts."""
    host = hosts.joined()
    return host.is_first if host else accelerator.is_main_process


def barrier(accelerator) -> None:
    """wait_for_everyone, skipped for one process: on XLA it compiles a rendezvous graph."""
    if hosts.joined():
        import torch.distributed as dist

        # gloo's own barrier, not dist.barrier: torch 2.9's asks torch._C._get_accelerator(), which raises ("Please
        # register PrivateUse1HooksInterface") once torchax, loaded for the JAX step, has named PrivateUse1 "jax".
        dist.monitored_barrier()
    elif accelerator.num_processes > 1:
        accelerator.wait_for_everyone()


def gather_objects(accelerator, value) -> list:
    """Every process's `value` (a small picklable host object), in process order, on every process.

    For decisions and checks made once per run, never inside the step loop.
    """
    if hosts.joined():
        import torch.distributed as dist

        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, value)
        return gathered
    if accelerator.num_processes == 1:
        return [value]
    if accelerator.distributed_type.value == "XLA":
        # accelerate.utils.gather_object raises NotImplementedError on XLA (Accelerate 1.15): torch_xla's own
        # all-gather of host objects (XLA collectives, graphs: never per step).
        return runtime.gather_objects(value)
    from accelerate.utils import gather_object

    return gather_object([value])


def position(accelerator) -> tuple[int, int]:
    """(this process's index, the job's processes), as gather_objects counts them: the hosts under SPMD on several."""
    host = hosts.joined()
    return (host.index, host.count) if host else (accelerator.process_index, accelerator.num_processes)


def is_main_process() -> bool:
    """The main process of the run, also where no Accelerator exists (yet, or any more)."""
    host = hosts.joined()
    if host:
        return host.is_first
    if "accelerate" in sys.modules:
        from accelerate.state import PartialState

        if PartialState._shared_state:
            return PartialState().is_main_process
    return os.environ.get("RANK", "0") == "0"


def say_once(accelerator):
    """A print for the run: the main process prints, above any progress bar; the others stay quiet."""

    def say(message: str) -> None:
        # Not accelerator.print: on an XLA CPU device its local process index is -1, so it prints nothing.
        # tqdm.write: a message in the middle of an epoch goes above the progress bar, not into it.
        if is_main(accelerator):
            from tqdm.auto import tqdm

            tqdm.write(message)

    return say


def where_am_i(accelerator) -> str:
    """'host NAME (process I)', as messages that name a process say it."""
    host = hosts.joined()
    return f"host {hosts.host_name()} (process {host.index if host else accelerator.process_index})"


def quiet_unless_main(accelerator) -> None:
    """Progress bars and library warnings once per run: only the main process shows them; the warnings that say
    nothing to a user (library_noise.py) none does."""
    library_noise.silence()
    if is_main(accelerator):
        return
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()


def sum_over_processes(accelerator, tensor):
    """Sum across processes; a no-op (and no extra graph) for one process."""
    if accelerator.num_processes == 1:
        return tensor
    return accelerator.reduce(tensor, reduction="sum")


def gather_over_processes(accelerator, tensor):
    """Every process's `tensor`, concatenated in process order; a no-op (and no extra graph) for one process."""
    if accelerator.num_processes == 1:
        return tensor
    return accelerator.gather(tensor)


def gather_rows_over_processes(accelerator, rows: dict) -> dict:
    """{name: host tensor of rows} with every process's rows, concatenated in process order; a no-op for one process.

    Accelerate's processes, as sum_over_processes counts them: under SPMD the graph already spans every host's chips
    and each host holds every row. Gathered as host objects over the host group (gloo: no XLA graph, where a device
    gather would compile one for each shape), once per evaluation, never per step.
    """
    if accelerator.num_processes == 1 or not rows:
        return rows
    import torch
    import torch.distributed as dist

    group = _host_group()
    parts = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, rows, group=group)
    return {name: torch.cat([part[name] for part in parts]) for name in rows}


_HOST_GROUP = []


def agree(accelerator, *flags: bool) -> list[bool]:
    """Each flag true on any process is true on every process, so that all take the same decision at one step."""
    if accelerator.num_processes == 1 and not hosts.joined():
        return list(flags)
    import torch
    import torch.distributed as dist

    values = torch.tensor([int(flag) for flag in flags], dtype=torch.int32)
    dist.all_reduce(values, op=dist.ReduceOp.MAX, group=_host_group())
    return [bool(value) for value in values.tolist()]


def _host_group():
    """gloo (host memory): the default group on the CPU; on XLA or GPUs its collectives would be device work."""
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return None
    if not _HOST_GROUP:
        _HOST_GROUP.append(dist.new_group(backend="gloo"))
    return _HOST_GROUP[0]
