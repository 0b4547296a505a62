"""Parallelism layouts: where the model, its optimizer state and each batch live, and how a checkpoint is written.

The training loop (loop/fit.py) is the same for every layout; it is given one of these and calls the
same methods whichever it is, those of the written contract `Layout` (layout.py):

  - data (data.py): one process per chip, a full replica of the model on each, batches split between
    processes by Accelerate. Accelerate's launchers start the processes. One process that sees several
    chips (`python train.py` on a TPU VM; data_spmd.py) drives them all over an SPMD mesh, replicas still.
  - fsdp (fsdp.py): one process per host, PyTorch/XLA SPMD with FSDPv2: parameters, gradients and
    optimizer state sharded over every chip along one mesh axis `fsdp`, batches sharded along it too.
    For a model whose training state does not fit on one chip.
"""

from ..xla import runtime


def layout_for(parallel, model):
    """The layout named by parallel.parallelism (checked by the config), given the run's ParallelismOptions and
    ModelOptions (config/groups.py): what it shards, and what of the model it recomputes and checkpoints.

    The data layout of one process that sees several chips drives them all over an SPMD mesh (data_spmd.py): asked
    before the runtime starts, from the launcher's environment (xla/runtime.py)."""
    if parallel.parallelism == "fsdp":
        from .fsdp import FsdpV2 as layout
    elif runtime.one_process_sees_several_chips():
        from .data_spmd import DataOverSpmd as layout
    else:
        from .data import DataParallel as layout
{%- if cookiecutter.task == "causal-lm" %}
    from .streams import streaming

    layout = streaming(layout)  # --streaming (streams.py)
{%- endif %}
    return layout(parallel, model)
