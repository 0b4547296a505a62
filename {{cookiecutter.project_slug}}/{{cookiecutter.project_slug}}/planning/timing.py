"""How long a step and a run take on a slice: the slower of two bounds on the step, and the rest of the run.

A step takes at least its FLOPs at the stated MFU, and at least its roofline: FLOPs at the chip's peak or bytes at its
HBM bandwidth, whichever is longer. The roofline's bytes are the TPU compiler's (plan.py --compile) where known, else
counted (estimate.step_bytes: state and activations written and read once, a lower bound). The run's hours add its
evaluations (a forward pass, a third of a training step's FLOPs a token) and its compiles.
"""

import math

# A graph's compile on the TPU VM's host, where nothing measured it: the order libtpu 0.0.21 took for the default
# models' steps on a 2-core machine here (bert-base-cased 52-126 s, Qwen2.5-0.5B 70-114 s; ../docs/plan.md). An
# evaluation's graph costs about what the training step's does (the rehearsal's figures).
ASSUMED_COMPILE_SECONDS = 120


def step(flops: float, counted_bytes: int | None, chip, mfu: float, compiler_roofline: float | None = None) -> dict:
    """One optimizer step's time per chip: the slower of the MFU time and the roofline, with both and which bound."""
    at_mfu = flops / (chip.peak_bf16_flops * mfu)
    if compiler_roofline is not None:
        roofline, source = compiler_roofline, "the TPU compiler's FLOPs and bytes accessed"
    elif counted_bytes is not None:
        roofline = max(flops / chip.peak_bf16_flops, counted_bytes / chip.hbm_bytes_per_second)
        source = "counted bytes (state and activations written and read once)"
    else:
        roofline, source = flops / chip.peak_bf16_flops, "FLOPs alone (no count of the activations: compile to know)"
    seconds = max(at_mfu, roofline)
    return {"model_flops_per_chip": flops, "mfu": mfu, "mfu_seconds": at_mfu, "roofline_seconds": roofline,
            "roofline_from": source, "seconds": seconds, "bound": "roofline" if roofline > at_mfu else "MFU"}


def evaluation(forward_flops_per_example: float, weight_bytes: int, chip, mfu: float, examples: int,
               batch_per_chip: int, chips: int) -> dict:
    """One evaluation over `examples` in batches of `batch_per_chip` a chip: each batch the slower of its FLOPs at the
    MFU and the weights read once."""
    batches = math.ceil(examples / (batch_per_chip * chips))
    per_batch = max(forward_flops_per_example * batch_per_chip / (chip.peak_bf16_flops * mfu),
                    weight_bytes / chip.hbm_bytes_per_second)
    return {"examples": examples, "batch_per_chip": batch_per_chip, "batches": batches, "seconds": batches * per_batch}


def run(steps: int, micro_batches: int, step_seconds: float, evaluations: int, evaluation_seconds: float,
        compile_seconds: float, compile_from: str) -> dict:
    """The run's hours: its micro-batches' steps, its evaluations and its compiles."""
    parts = {"training_seconds": steps * micro_batches * step_seconds, "evaluations": evaluations,
             "evaluation_seconds": evaluations * evaluation_seconds, "compile_seconds": compile_seconds,
             "compile_from": compile_from}
    hours = (parts["training_seconds"] + parts["evaluation_seconds"] + compile_seconds) / 3600
    return {**parts, "hours": hours}
