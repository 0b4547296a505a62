"""What a run says of its memory before it compiles anything, and when it stops there (loop/preparation.py).

The estimate (planning/estimate.py) is held to the error the benchmark group "plan against the TPU compiler" measures;
a kept rehearsal of the same recipe (plan.py --rehearse, planning/rehearsed.py) is the TPU compiler's own answer and
is held to the chip exactly.
"""

from dataclasses import replace

from . import estimate
from .targets import CHIPS, GIB

# How far the estimate overstated the TPU compiler's peak at most, by task, over the rows of the benchmark group "plan
# against the TPU compiler" (docs/plan-matrix.json; scripts/plan_matrix.py's margins(), which a test holds these to):
# a run whose estimate exceeds its device's memory by less may still fit, so it warns; by more, it stops before
# compiling. Never below MEASURED_ERROR_FLOOR, never above the group's tolerance (15 %).
MEASURED_ERROR = {"text-classification": 0.13, "causal-lm": 0.05}
MEASURED_ERROR_FLOOR = 0.05


def what_would_fit(model, recipe: estimate.Recipe, chips: int, device_bytes: int, peak: int) -> str:
    """The run's ways into `device_bytes` a chip, by the estimate: a smaller batch, fsdp, checkpointing, a larger chip."""
    would_fit = []
    batch = estimate.largest_batch(model, recipe, chips, device_bytes)
    if batch:
        would_fit.append(f"--train_batch_size {batch}")

    def fits(changed) -> bool:  # a changed recipe the estimate has no figure for (no_formula) is not offered
        peak_bytes = estimate.memory(model, changed, chips, device_bytes)["peak_bytes"]
        return peak_bytes is not None and peak_bytes <= device_bytes

    if recipe.layout == "data" and chips > 1 and fits(replace(recipe, layout="fsdp")):
        would_fit.append("--parallelism fsdp")
    if not recipe.gradient_checkpointing and fits(replace(recipe, gradient_checkpointing=True)):
        would_fit.append("--gradient_checkpointing")
    larger = [chip.generation for chip in CHIPS.values() if chip.usable_hbm_bytes >= peak]
    if larger:
        would_fit.append(f"a chip with more memory ({', '.join(larger)})")
    return "; ".join(would_fit) or "a smaller model"


def smaller_evaluation(model, recipe: estimate.Recipe, chips: int, device_bytes: int, peak: int, eval_batch: int) -> str:
    """An eval batch that would fit where the compiler's evaluation at `eval_batch` a chip needed `peak`: its memory
    past the weights taken to grow with its rows (the compiler's peak at 4,096 and 16,384 rows of a narrowed BERT:
    4.70 and 18.63 GiB), with a tenth kept back, since the compiler's layout is not exactly linear."""
    weights = estimate.memory(model, recipe, chips, device_bytes)["parts"]["weights"]
    rows = int(0.9 * eval_batch * (device_bytes - weights) / (peak - weights)) if device_bytes > weights else 0
    if rows < 1:
        return "none at this size: the weights alone fill the chip"
    return f"--eval_batch_size {rows} or fewer (about; python plan.py --compile --eval_batch_size {rows} to know)"


def check_at_start(model, recipe: estimate.Recipe, chips: int, device_bytes: int | None,
                   rehearsed: dict | None = None, eval_batch: int | None = None) -> tuple[list[str], str | None]:
    """(the lines a run prints before it compiles, why it must stop or None).

    It stops when the estimate exceeds the chip's memory by more than MEASURED_ERROR (its task's), and warns when by less, naming
    what would fit; or, where plan.py --rehearse kept this recipe's rehearsal for this slice, when the TPU compiler's
    peak exceeds it at all (the compiler's answer, not an estimate). A device that reports no memory is then held to
    the chip table's usable HBM for the rehearsed generation. Where the estimate has no formula for the architecture,
    only the state (weights and optimizer state, exact) is held to the chip.
    """
    offers = "the device offers"
    if rehearsed is not None:
        peak = rehearsed["largest_peak_bytes"]
        if device_bytes is None:
            device_bytes = CHIPS[rehearsed["generation"]].usable_hbm_bytes
            offers = f"a {rehearsed['generation']} chip offers a program (the chip table: this device reports none)"
        margin, what = 0.0, (f"{'rehearsed' if rehearsed['source'] == 'rehearse' else 'compiled'}: the TPU "
                             f"compiler's peak, {rehearsed['largest']}, plan.py --{rehearsed['source']} for "
                             f"{rehearsed['target']} of {rehearsed['rehearsed_on']}")
    else:
        estimated = estimate.memory(model, recipe, chips, device_bytes)
        if estimated["peak_bytes"] is None:
            parts = estimated["parts"]
            state = parts["weights"] + parts["optimizer_state"]
            line = f"plan: no estimate of the peak ({estimated['why']}); the weights and optimizer state {state / GIB:.2f} GiB per chip"
            if device_bytes is None or state <= device_bytes:
                return [line], None
            return [line], (f"train_batch_size={recipe.per_chip_batch}: the weights and optimizer state alone need "
                            f"{state / GIB:.2f} GiB per chip, more than the {device_bytes / GIB:.2f} GiB this device "
                            f"offers (python plan.py --help)")
        peak = estimated["peak_bytes"]
        if device_bytes is None:
            return [f"plan: {peak / GIB:.2f} GiB per chip (estimate; this device reports no memory to check it against)"], None
        margin, what = MEASURED_ERROR["causal-lm" if recipe.causal_lm else "text-classification"], "estimate"
    lines = [f"plan: {peak / GIB:.2f} GiB per chip ({what}) of the {device_bytes / GIB:.2f} GiB {offers}"]
    if peak <= device_bytes:
        return lines, None
    if peak <= device_bytes * (1 + margin):
        lines.append(f"warning: the estimate is {peak / device_bytes - 1:.0%} over the device's memory, inside its "
                     f"measured error ({margin:.0%}): the compile may run out of memory; what would fit: "
                     f"{what_would_fit(model, recipe, chips, device_bytes, peak)}")
        return lines, None
    measured = f" ({'rehearsed' if rehearsed['source'] == 'rehearse' else 'compiled'})" if rehearsed else ""
    if rehearsed and "evaluation" in rehearsed["largest"] and eval_batch:  # the step fits; its evaluation does not
        return lines, (f"eval_batch_size={eval_batch}: the evaluation needs {peak / GIB:.2f} GiB per chip{measured}, "
                       f"more than the {device_bytes / GIB:.2f} GiB this device offers (python plan.py --help); what "
                       f"would fit: {smaller_evaluation(model, recipe, chips, device_bytes, peak, eval_batch)}")
    return lines, (f"train_batch_size={recipe.per_chip_batch}: the step needs {'' if rehearsed else 'about '}"
                   f"{peak / GIB:.2f} GiB per chip{measured}, "
                   f"more than the {device_bytes / GIB:.2f} GiB this device offers (python plan.py --help); "
                   f"what would fit: {what_would_fit(model, recipe, chips, device_bytes, peak)}")
