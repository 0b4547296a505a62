"""Which host am I, and how many hosts: one answer for the whole project.

Under SPMD (parallelism fsdp) each host of a pod runs one process, and Accelerate sees one process per
host: every host is Accelerate's main process. What must happen once per job (write `LATEST`, the
report, the export) or be agreed by every host (which checkpoint to resume, stop at this step) asks
`this_host()` instead, and the hosts talk over a host-side gloo group joined with `join()`.

`this_host()` and `host_name()` are the only places that ask; a test simulating several hosts on one
machine replaces these two functions (from outside the shipped code) and nothing else.
"""

import socket
from dataclasses import dataclass

from ..xla import runtime

# PyTorch/XLA's rendezvous: under SPMD its rank and world size are the process index and count.
XLA_RENDEZVOUS = "xla://"


@dataclass(frozen=True)
class Host:
    index: int  # 0 is the host that writes the job's shared files
    count: int
    rendezvous: str = XLA_RENDEZVOUS  # where the hosts' gloo group meets (torch.distributed's init_method)

    @property
    def is_first(self) -> bool:
        return self.index == 0


def this_host() -> Host:
    """torch_xla's process index and count (one process per host under SPMD); one host without torch_xla.

    Asks the runtime, which starts it: call it after the precision and debug variables are set.
    """
    if not runtime.installed():
        return Host(0, 1)
    return Host(*runtime.process_index_and_count())


def host_name() -> str:
    """This machine's name, without starting any runtime: it names this host's own files (compilation cache, logs)."""
    return socket.gethostname()


def process_label() -> str:
    """`<host name>-process-<local rank>`: unique per process across hosts that share one output_dir."""
    from .environment import local_rank

    return f"{host_name()}-process-{local_rank()}"


_JOINED: list[Host] = []


def join(host: Host) -> None:
    """Join the hosts' gloo group (host memory, no device work): decisions, barriers and checkpoint plans use it."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=host.rendezvous, rank=host.index, world_size=host.count)
    _JOINED[:] = [host]


def joined() -> Host | None:
    """The host, when this process joined several hosts (fsdp on a pod); None otherwise."""
    return _JOINED[0] if _JOINED else None


def left() -> None:
    """This process has left the hosts' group (main_process.leave_together closed it)."""
    _JOINED.clear()
