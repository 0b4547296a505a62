"""One precision mode on one model, measured inside its own (forked) process.

The process sets the mode's XLA variables before its first tensor reaches the
device, checks the lowered graph, and only then times steady-state steps of the
project's own `loop/step.py`'s `train_step`, each wrapped in `torch_xla.sync(wait=True)`.
"""

import contextlib
import statistics
import time

import torch

from {{ cookiecutter.project_slug }}.data import batching
from {{ cookiecutter.project_slug }}.loop.step import StepParts, train_step
from {{ cookiecutter.project_slug }}.precision import levels as precision
from {{ cookiecutter.project_slug }}.tasks.text_classification import make_collator
from {{ cookiecutter.project_slug }}.watch import compilations
from {{ cookiecutter.project_slug }}.xla import device as devices

from . import graph_types, workload
from .profiles import Profile


def _memory_peak(device) -> int | None:
    """Peak device memory where the runtime reports it (TPUs do; the CPU device does not)."""
    try:
        import torch_xla.core.xla_model as xm

        info = xm.get_memory_info(device)
    except Exception:  # the CPU client has no memory statistics
        return None
    return info.get("peak_bytes_used") or info.get("bytes_used")


def run_mode(mode: graph_types.Mode, model_name: str, profile: Profile) -> dict:
    precision.set_xla_variables(mode.xla_level)  # read once, when the first tensor reaches the device
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

    accelerator = Accelerator(mixed_precision="no")  # the mode, not Accelerate, decides the precision
    device = accelerator.device
    config = workload.config_for(profile, train_batch_size=profile.batch_size)
    set_seed(config.seed)
    tokenizer, train_examples, _ = workload.demo_examples(config)
    model = workload.build(model_name, config, len(tokenizer))
    if mode.cast_model:
        model = model.to(torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.resolved_learning_rate(True))
    collator = make_collator(tokenizer, "fixed", config.max_seq_length)
    loader = batching.train_loader(train_examples, collator, profile.batch_size, config.seed)
    # One step more than run, so the rate never reaches exactly 0 (a graph of its own).
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, profile.loss_steps + 1)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    batches = workload.forever(loader)
    result = {
        "mode": mode.name, "how": mode.how, "model": model_name, "parameters": parameters,
        "device": devices.device_kind(device), "batch_size": profile.batch_size,
        "max_seq_length": config.max_seq_length,
    }

    def step(batch):
        context = torch.autocast("xla", dtype=torch.bfloat16) if mode.autocast else contextlib.nullcontext()
        with context:
            return train_step(accelerator, StepParts(model, optimizer, scheduler), batch).loss

    import torch_xla

    losses, times = [], []
    with compilations.counting_compilations() as warm:
        probe = precision.lowered_types(device)
        loss = step(next(batches))
        matmuls = graph_types.matmul_types(torch_xla._XLAC._get_xla_tensors_text([loss, *model.parameters()]))
        result["graph_types"] = graph_types.describe(probe, matmuls)
        failure = graph_types.check(mode, probe, matmuls)
        if failure:
            return {**result, "status": "failed", "reason": failure}
        for index in range(profile.warmup_steps):
            if index:
                loss = step(next(batches))
            devices.sync(device, wait=True)
            losses.append(loss.item())
    with compilations.counting_compilations() as steady:
        for _ in range(profile.timed_steps):
            batch = next(batches)
            devices.sync(device, wait=True)
            started = time.perf_counter()
            loss = step(batch)
            devices.sync(device, wait=True)
            times.append(time.perf_counter() - started)
            losses.append(loss.item())
    param_bytes = graph_types.graph_bytes(model.parameters())
    inner = getattr(optimizer, "optimizer", optimizer)
    optimizer_bytes = graph_types.graph_bytes(graph_types.optimizer_tensors(inner))
    return {
        **result,
        "status": "ok",
        "step_median_s": statistics.median(times),
        "step_min_s": min(times),
        "warmup_steps": profile.warmup_steps,
        "timed_steps": profile.timed_steps,
        "compilations": warm["compilations"] + steady["compilations"],
        "compile_seconds": warm["compile_seconds"] + steady["compile_seconds"],
        "steady_compilations": steady["compilations"],
        "param_bytes": param_bytes,
        "optimizer_bytes": optimizer_bytes,
        "state_bytes": param_bytes + optimizer_bytes,
        "bytes_from": "graph: element types of the device data holding the weights and optimizer state",
        # Measured by the device where it reports memory (a TPU does; XLA:CPU does not: n/a).
        "device_memory_peak_bytes": _memory_peak(device),
        "loss_steps": len(losses),
        "final_loss": losses[-1],
        "losses": losses,
    }
