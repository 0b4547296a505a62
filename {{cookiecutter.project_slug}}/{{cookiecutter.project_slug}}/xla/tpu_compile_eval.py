"""plan.py --compile's evaluation: the run's eval batch as one JAX function (jax_eval.py's), lowered from shapes alone
and compiled for a TPU by libtpu as tpu_compile.py compiles the step, with the same figures per chip.

Why beside the step: the evaluation is a program of its own, with a batch of its own (--eval_batch_size) and a whole
batch's logits at once. A Llama-3.1-8B rehearsal at 4 x 1,024 a chip on a v5e-8, whose step fit (12.02 GiB of 15.75),
ran out of the chip in its evaluation (16 a chip then); a plan that compiled the step alone had said "fits".
"""

import hashlib
from pathlib import Path

import torch

from .jax_eval import eval_function
from .jax_step import step_inputs
from .tpu_compile import _cache_key, _jax_dtype, _kept, compiled_or_out_of_hbm, kept_or_mesh, sharding


def compile_eval(model, eval_batch, batch: dict, *, topology: str, chips_per_host_bounds: tuple, shard_weights: bool,
                 autocast_dtype=None, metric_dtype=torch.float32, cache: Path | None = None) -> dict:
    """Compile the evaluation of one batch for the slice: the compiler's figures per chip (tpu_compile.compile_step's).

    `model`: on the meta device, as the run would evaluate it. `eval_batch`: the task's. `batch`: {name: (shape, torch
    dtype)} of the global eval batch, split over every chip along its first dimension; each row's `valid` flag beside
    it, as the run's loader gives it (data/batching.py). `shard_weights`: FSDPv2's layout, as compile_step's."""
    import jax

    code = [hashlib.sha256((Path(__file__).parent / name).read_bytes()).hexdigest()
            for name in ("tpu_compile_eval.py", "jax_eval.py")]  # _cache_key reads the step's code, not these
    key = _cache_key(model, batch, "evaluation", topology, chips_per_host_bounds, shard_weights, autocast_dtype,
                     metric_dtype, *code)
    found, kept, mesh = kept_or_mesh(cache, key, topology, chips_per_host_bounds)
    if kept:
        return kept

    def abstract(shape, dtype, split: bool):
        return jax.ShapeDtypeStruct(tuple(shape), _jax_dtype(jax.numpy, dtype), sharding=sharding(mesh, tuple(shape), split))

    trainable, frozen = step_inputs(model)
    buffers = dict(model.named_buffers())
    rows = next(iter(batch.values()))[0][0]
    weights = {name: abstract(t.shape, t.dtype, shard_weights and name not in buffers)
               for name, t in {**trainable, **frozen}.items()}
    inputs = {name: abstract(shape, dtype, True) for name, (shape, dtype) in batch.items()}
    valid = abstract((rows,), torch.int64, True)
    # Traced with JAX's 32-bit integers, as the step is (jax_step._int32), where the run traces its evaluation with
    # 64-bit ones on (jax_eval.py: its counts are int64 sums). libtpu 0.0.21 aborts the whole process compiling a
    # Llama forward traced with 64-bit integers once any input is split over more than one chip ("windowing_util.cc:
    # Check failed: desc->window_bounds.size() == rank (3 vs. 1)", on v5e-4, v5e-8, v6e-8 and v5p-8 alike; one chip
    # compiles). What decides the peak is the forward's float activations and logits, the same in both; the integers
    # are the batch's token ids and a few counts.
    lowered = jax.jit(eval_function(model, eval_batch, metric_dtype, autocast_dtype)).lower(weights, inputs, valid)
    return _kept(found, compiled_or_out_of_hbm(lowered, mesh.devices.size, topology))
