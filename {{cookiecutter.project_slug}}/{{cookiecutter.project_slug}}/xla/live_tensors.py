"""What torch_xla holds between two of the rehearsal's cuts (rehearsal.py): the live tensors Python can reach, which
are placeholders, the replicated sharding, the random seed the step marker moves on; and where in the loop a cut is
made. Private to the rehearsal.
"""

import gc
import sys

# Which part of the loop made a cut: the file the cut was called from (the loop's own modules).
PHASES = (("loop/fit.py", "training step"), ("loop/evaluation.py", "evaluation"))


def _next_seed() -> None:
    """What torch_xla's step marker does to the random seed, without its sync (which would run what C++ still holds
    on placeholders): the next graph takes the seed afresh as data. Without it the seed's arithmetic grows from graph
    to graph (an LCG step each draw) and every step is another graph. The next seed is the marker's own:
    seed * 214013 + 2531011 (torch_xla's kSeedMul, kSeedAdd)."""
    import torch_xla

    device = str(torch_xla.device())
    seed = torch_xla._XLAC._xla_get_rng_seed(device)
    torch_xla._XLAC._xla_set_rng_seed((seed * 214013 + 2531011) % 2 ** 64, device)


def _replicated(torch, device):
    """The replicated sharding under SPMD (None without it), taken from a tensor marked so."""
    import torch_xla
    import torch_xla.runtime as xr

    if not xr.is_spmd():
        return None
    from .sharding import replicate_under_spmd

    probe = torch.zeros(1).to(device)
    replicate_under_spmd(probe)
    return torch_xla._XLAC._get_xla_op_sharding(probe)


def _live_xla_tensors() -> list:
    """Every XLA tensor Python can reach (what torch_xla.sync would consider, but for tensors only C++ holds), with
    the gradients of the parameters among them (autograd makes those in C++)."""
    import torch

    found, seen = [], set()
    frozen = gc.get_freeze_count()
    if frozen:  # the run freezes what is alive at its start (loop/collector.py), the model among it: out of
        gc.unfreeze()  # get_objects' sight until unfrozen; frozen again after (with what came since: no harm here)
    everything = gc.get_objects()
    if frozen:
        gc.freeze()
    for thing in everything:
        if isinstance(thing, torch.Tensor) and thing.device.type == "xla":
            for tensor in (thing, getattr(thing, "grad", None) if isinstance(thing, torch.nn.Parameter) else None):
                if tensor is not None and id(tensor) not in seen:
                    seen.add(id(tensor))
                    found.append(tensor)
    return found


def _placeholder(tensor) -> bool:
    import torch_xla

    return bool(torch_xla._XLAC._is_placecholder(tensor))  # sic: torch_xla's spelling


def _phase() -> tuple[str, dict | None]:
    """(kind, the batch's shapes) of the cut being made, from the loop's frame that made it."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        for ending, kind in PHASES:
            if path.endswith(ending):
                batch = frame.f_locals.get("batch")
                group = frame.f_locals.get("group")  # a training call's batches (fit.py): their first one's shapes
                if isinstance(group, list) and group:
                    batch = group[0]
                shapes = {name: list(value.shape) for name, value in batch.items() if hasattr(value, "shape")} \
                    if hasattr(batch, "items") else None
                return kind, shapes
        frame = frame.f_back
    return "other", None


def _epoch() -> int | None:
    """The run's epoch (from 1) at the cut being made: the loop's RunState, as its frames hold it."""
    frame = sys._getframe(2)
    while frame is not None:
        run = frame.f_locals.get("run")
        if hasattr(run, "epoch"):
            return run.epoch + 1
        frame = frame.f_back
    return None
