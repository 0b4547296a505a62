"""The TPU's own compiler, on this machine and without a TPU: the whole training step (jax_step.py's function) lowered
from shapes alone and compiled for a TPU topology by libtpu, as MaxText's train_compile.py does for its JAX models.

What comes back is the compiler's, per chip: its memory analysis (what the step's inputs, outputs and temporaries take
in HBM, and the peak) and cost analysis (FLOPs, bytes accessed), with the seconds the compile took: what a TPU's first
step waits for, give or take the host. A step that does not fit fails to compile, with the TPU's own words.

Needs the `plan` extra (libtpu, about 150 MB; jax and torchax as the JAX step does). Nothing is allocated:
the model lives on the meta device and every input is a jax.ShapeDtypeStruct.
"""

import hashlib
import json
import os
import re
import time
from pathlib import Path

import torch

from .jax_step import step_function, step_inputs
from .runtime import torchax_for_the_jax_step
from .several_steps import several_steps

# What libtpu says when a step does not fit: "Ran out of memory in memory space hbm. Used 19.98G of 15.75G hbm."
# (G: GiB; v5e's 16 GiB offer 15.75 to a program.)
OUT_OF_HBM = re.compile(r"Used ([\d.]+)G of ([\d.]+)G hbm")
# The mesh axis of both layouts: FSDPv2's name (parallel/fsdp.py); the data layout's batch is split along it too.
AXIS = "fsdp"


def tpu_compiler_problem() -> str | None:
    """Why the TPU compiler cannot run here, or None."""
    import importlib.util

    missing = [name for name in ("jax", "libtpu", "torchax") if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed" if missing else None


def topology_devices(topology: str, chips_per_host_bounds: tuple):
    """The devices of a TPU slice nobody rented: `topology` as jax names it ('v5e:2x4', 'v5p:2x2x1')."""
    # libtpu refuses to load while another process holds its lock file (a second plan, a test beside): this
    # process only compiles, so it may load beside them. Without a TPU it cannot find its workers' names.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    from jax.experimental import topologies

    description = topologies.get_topology_desc(
        platform="tpu", topology_name=topology, chip_config_name="default",
        chips_per_host_bounds=tuple(chips_per_host_bounds), num_slices=1, wrap=(False,) * len(chips_per_host_bounds),
    )
    return description.devices


def compile_step(model, batch: dict, *, topology: str, chips_per_host_bounds: tuple, shard_weights: bool,
                 autocast_dtype=None, rows: dict, constants: tuple, max_grad_norm: float | None, accumulation: int = 1,
                 scan_layers: bool = False, steps: int = 1,
                 cache: Path | None = None) -> dict:
    """Compile the step for the slice and return the compiler's figures per chip.

    `model`: on the meta device, as the run would train it (peft-wrapped, cast). `batch`: {name: (shape, torch dtype)}
    of the global batch (all `accumulation` micro-batches of it), split over every chip along its first dimension. `shard_weights`: FSDPv2's layout, every
    weight (and its moments) split over the chips (sharding() says along which dimension); else each chip holds them
    whole (the data layout). `rows`: each trainable weight's optimizer row (its param group); `constants`: each
    row's (beta1, beta2, eps). `steps`: --steps_per_execution's K, the call of K steps (several_steps.py) over K such
    batches. `cache`: a folder of earlier answers (JSON), keyed by everything the compile reads,
    this module's and jax_step.py's code and the jax and libtpu releases among it: a plan asked again (another
    batch's estimate, a benchmark run again) does not wait minutes for the same compile.
    """
    import jax
    import jax.numpy as jnp

    key = _cache_key(model, batch, topology, chips_per_host_bounds, shard_weights, autocast_dtype, rows, constants,
                     max_grad_norm, *([accumulation] if accumulation > 1 else []),  # an earlier answer's key unchanged
                     *(["scan_layers"] if scan_layers else []), *([f"steps={steps}"] if steps > 1 else []))
    found, kept, mesh = kept_or_mesh(cache, key, topology, chips_per_host_bounds)
    if kept:
        return kept
    chips = mesh.devices.size

    def abstract(tensor_or_shape, dtype=None, split=False):
        shape = tuple(tensor_or_shape.shape) if dtype is None else tuple(tensor_or_shape)
        dtype = _jax_dtype(jnp, dtype or tensor_or_shape.dtype)
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding(mesh, shape, split))

    trainable, frozen = step_inputs(model)
    weights = {name: abstract(p, split=shard_weights) for name, p in trainable.items()}
    # The project's AdamW keeps its moments in the weight's dtype (loop/adamw.py), sharded as the weight is.
    moments = {name: (weights[name], weights[name]) for name in trainable}
    # FSDPv2 shards frozen weights (LoRA's base) too, not buffers.
    buffers = dict(model.named_buffers())
    fixed = {name: abstract(t, split=shard_weights and name not in buffers) for name, t in frozen.items()}
    inputs = {name: abstract(shape, dtype, split=True) for name, (shape, dtype) in batch.items()}
    moving = abstract((len(constants), 3), torch.float32)
    seed = abstract((2,), torch.int32)
    function = step_function(model, trainable, autocast_dtype, scan_layers)
    if steps > 1:  # K batches, K rows of moving numbers and K (seed, count, real) triples
        function = several_steps(function, list(buffers))
        inputs = [dict(inputs) for _ in range(steps)]
        moving = abstract((steps, len(constants), 3), torch.float32)
        seed = abstract((steps, 3), torch.int32)

    def step(trainable, frozen, moments, batch, moving, seed):
        return function(trainable, frozen, moments, batch, moving, seed, rows, constants, max_grad_norm, accumulation)

    # The weights and moments are donated, as the run writes its new ones over them: outputs alias inputs.
    lowered = jax.jit(step, donate_argnums=(0, 2)).lower(weights, fixed, moments, inputs, moving, seed)
    figures = compiled_or_out_of_hbm(lowered, chips, topology)
    if figures["fits"] is False:
        return _kept(found, figures)
    # XLA's cost analysis counts a loop's body once: with accumulation its FLOPs and bytes are one micro-batch's pass
    # and the update (plan_cli.with_compiler times them by this for the step); a call of several steps is a loop too,
    # counted as one step.
    return _kept(found, {**figures, "micro_batches": accumulation, "steps_per_call": steps})


def kept_or_mesh(cache: Path | None, key: str, topology: str, chips_per_host_bounds: tuple):
    """(the cache's file for `key`, the answer kept there or None, else the slice's one-axis mesh to compile for)."""
    import numpy as np
    from jax.sharding import Mesh

    found = cache / f"{key}.json" if cache else None
    if found and found.is_file():
        return found, {**json.loads(found.read_text()), "cached": str(found)}, None
    torchax_for_the_jax_step()
    return found, None, Mesh(np.array(topology_devices(topology, chips_per_host_bounds)), (AXIS,))


def sharding(mesh, shape: tuple, split: bool):
    """An input's layout over the slice's one axis: whole on every chip, or `split` as FSDPv2 splits it."""
    from jax.sharding import NamedSharding, PartitionSpec

    # FSDPv2 splits the first dimension, its last shard padded when it does not divide (XLA's uneven sharding); jax
    # refuses an input that does not divide, so the first dimension that does is split instead: the same bytes per
    # chip, up to that padding (bert-base-cased's 28,996-row table splits by its 768 columns over 8 chips).
    chips = mesh.devices.size
    dimension = next((index for index, size in enumerate(shape) if size % chips == 0), None) if split else None
    if dimension is None:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, PartitionSpec(*[AXIS if index == dimension else None for index in range(len(shape))]))


def compiled_or_out_of_hbm(lowered, chips: int, topology: str) -> dict:
    """Compile a lowered function for the TPU: its figures per chip, or the TPU's own verdict that it does not fit
    (the memory it would have needed, `fits` False)."""
    started = time.perf_counter()
    try:
        compiled = lowered.compile()
    except Exception as error:  # jax raises its XlaRuntimeError, a RuntimeError's subclass in some releases only
        used = OUT_OF_HBM.search(str(error))
        if not used:
            raise
        return {"peak_bytes": int(float(used.group(1)) * 2 ** 30), "parts": {}, "fits": False, "said": used.group(0),
                "compile_seconds": round(time.perf_counter() - started, 1), "chips": chips, "topology": topology,
                "flops": None, "bytes_accessed": None}
    seconds = time.perf_counter() - started
    memory, cost = compiled.memory_analysis(), compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return {**_figures(memory, cost), "compile_seconds": round(seconds, 1), "chips": chips, "topology": topology,
            "fits": None}


def _figures(memory, cost) -> dict:
    """The compiler's memory and cost analysis, per chip: the peak (libtpu's own; else summed from its parts: on a TPU
    the temporaries can exceed the peak, so the peak is the figure to read), its parts, FLOPs and bytes accessed."""
    parts = {"arguments": memory.argument_size_in_bytes, "outputs": memory.output_size_in_bytes,
             "temporaries": memory.temp_size_in_bytes, "code": memory.generated_code_size_in_bytes,
             "aliased": memory.alias_size_in_bytes}
    return {
        "peak_bytes": int(getattr(memory, "peak_memory_in_bytes", 0) or
                          parts["arguments"] + parts["outputs"] - parts["aliased"] + parts["temporaries"]),
        "parts": {name: int(value) for name, value in parts.items()},
        "flops": float(cost.get("flops", 0.0)), "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
    }


def _releases() -> list:
    from importlib.metadata import version

    return [version("jax"), version("libtpu")]


def _cache_key(model, batch, *settings) -> str:
    """sha256 of what the compile reads: the model's config and inputs (names, shapes, dtypes, trainable or not), its
    recomputed layers (--gradient_checkpointing), the batch, the settings, the jax and libtpu releases and the code that builds and compiles the step (runtime.py sets
    its random generator)."""
    from importlib.metadata import version

    trainable, frozen = step_inputs(model)
    config = {key: value for key, value in model.config.to_dict().items() if key != "_name_or_path"}
    inputs = [(name, list(t.shape), str(t.dtype), name in trainable) for name, t in {**trainable, **frozen}.items()]
    code = [(Path(__file__).parent / name).read_bytes()
            for name in ("tpu_compile.py", "jax_step.py", "several_steps.py", "model_in_trace.py", "runtime.py")]
    recomputed = sorted({type(module).__name__ for module in model.modules() if getattr(module, "gradient_checkpointing", False) is True})
    material = json.dumps([config, inputs, {name: [list(shape), str(dtype)] for name, (shape, dtype) in batch.items()},
                           [str(setting) for setting in settings] + recomputed, version("jax"), version("libtpu"),
                           [hashlib.sha256(text).hexdigest() for text in code]], sort_keys=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def _kept(found: Path | None, figures: dict) -> dict:
    """The figures, written to the cache (staged and renamed: a reader never sees half a file)."""
    if found:
        found.parent.mkdir(parents=True, exist_ok=True)
        staged = found.with_suffix(f".{os.getpid()}.tmp")
        staged.write_text(json.dumps(figures))
        staged.replace(found)
    return figures


def _jax_dtype(jnp, dtype):
    """As the run hands tensors to JAX: int64 as int32 (jax_step._int32 says why)."""
    return {torch.int64: jnp.int32, torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16,
            torch.int32: jnp.int32, torch.bool: jnp.bool_}[dtype]
