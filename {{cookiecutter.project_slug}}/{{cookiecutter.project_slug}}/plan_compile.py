"""plan.py --compile: the run's step compiled for each target by the TPU's compiler (xla/tpu_compile.py), and its figures
beside the estimate."""

from pathlib import Path

from .config import TrainConfig, UserError, step_function
from .planning import estimate, rehearsed, timing


class CompileFailed(UserError, RuntimeError):
    """The TPU compiler refused the step for a reason other than memory (that one is a figure of the plan)."""

    exit_code = 1  # not bad input (2): the input was fine, the compiler failed


def compiler_problem(config: TrainConfig) -> str | None:
    """Why --compile cannot compile this run's step: it compiles the whole-step function (xla/jax_step.py)."""
    from .xla.tpu_compile import tpu_compiler_problem

    missing = tpu_compiler_problem()
    if missing:
        return f"compile: {missing}: pip install -e '.[plan]' -c constraints.txt"
    # What the JAX step cannot do is config/step_function.py's; a pure_bf16 level is no reason here (the plan hands
    # the function bf16 weights itself: run_model), and the run's device, processes and hosts are not this machine's.
    lacks = step_function.whole_step_refusals(config)
    if "optim" in lacks:
        return "compile: the whole-step function steps the default AdamW only (--optim adamw, no --kahan_summation)"
    return None


def add_compiles(report: dict, chosen: list, model, config: TrainConfig, recipe: estimate.Recipe, cache: Path,
                 say=print) -> None:
    """Each target's `compiler` part in the plan's report, its step's time from the compiler's roofline; the data
    layout's answer kept for a run of the same recipe (planning/rehearsed.py)."""
    for target in chosen:
        say(f"compiling the step for {target.name} ({target.topology()[0]}) with the TPU's compiler "
            f"(answers kept in {cache})...")
        compiled = refused_as_error(f"compile for {target.name}", compile_for, model, config, recipe, target, cache)
        with_compiler(report["targets"][target.name], compiled, target.chip)
        # The evaluation too, at the run's own eval batch: a step that fits says nothing of it (tpu_compile_eval.py).
        rows = config.per_chip_eval_batch(recipe.per_chip_batch)
        say(f"compiling the evaluation for {target.name} ({rows} a chip)...")
        evaluation = refused_as_error(f"compile the evaluation for {target.name}", compile_eval_for, model, recipe, target,
                                      rows, cache)
        with_evaluation(report["targets"][target.name], evaluation, rows)
        if (steps := several(config)) > 1:  # --steps_per_execution K: its call compiled too, beside one step's
            say(f"compiling the call of {steps} steps for {target.name}...")
            calls = compile_for(model, config, recipe, target, cache, steps)
            report["targets"][target.name]["compiler"]["several_steps"] = {
                "steps_per_call": steps, **{key: calls.get(key) for key in ("peak_bytes", "fits", "compile_seconds")}}
        if recipe.layout == "data" and config.step_function != "lazy":
            rehearsed.record_compiled(cache, rehearsed.recipe_key(model, recipe, config), target,
                                      report["targets"][target.name]["compiler"])


def refused_as_error(what: str, compile_it, *arguments) -> dict:
    """compile_it(*arguments)'s figures; anything it raises but "does not fit" (a figure, not an error) as
    CompileFailed, in the compiler's own first line."""
    try:
        return compile_it(*arguments)
    except Exception as error:
        said = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        raise CompileFailed(f"{what}: {said}") from error


def several(config: TrainConfig) -> int:
    """--steps_per_execution as a number: auto is 1 here (on a TPU the run measures its K: loop/calls.py)."""
    return step_function.steps_asked(config) or 1


def compile_for(model, config: TrainConfig, recipe: estimate.Recipe, target, cache: Path, steps: int = 1) -> dict:
    import torch

    from .loop.optimizers import make_optimizer, parameter_groups
    from .tasks import task
    from .xla.jax_step import step_inputs
    from .xla.tpu_compile import compile_step

    optimizer = make_optimizer("adamw", parameter_groups(model, config.weight_decay), 1e-5, config.weight_decay, False)
    group_of = {id(p): index for index, group in enumerate(optimizer.param_groups) for p in group["params"]}
    trainable, _ = step_inputs(model)
    topology, bounds = target.topology()
    chips = target.chips  # the batch split over the slice's chips in both layouts (targets.Target.topology)
    return compile_step(
        model, task.batch_shapes(model, recipe.per_chip_batch * chips * config.gradient_accumulation_steps, recipe.length),
        cache=cache, accumulation=config.gradient_accumulation_steps,
        topology=topology,
        chips_per_host_bounds=bounds, shard_weights=recipe.layout == "fsdp",
        autocast_dtype=torch.bfloat16 if recipe.level == "bf16" else None,
        rows={name: group_of[id(p)] for name, p in trainable.items()},
        constants=tuple((*group["betas"], group["eps"]) for group in optimizer.param_groups),
        max_grad_norm=config.max_grad_norm or None, steps=steps,
    )


def compile_eval_for(model, recipe: estimate.Recipe, target, rows_per_chip: int, cache: Path) -> dict:
    import torch

    from .tasks import task
    from .xla.tpu_compile_eval import compile_eval

    topology, bounds = target.topology()
    return compile_eval(model, task.eval_batch, task.batch_shapes(model, rows_per_chip * target.chips, recipe.length),
                        topology=topology, chips_per_host_bounds=bounds, shard_weights=recipe.layout == "fsdp",
                        autocast_dtype=torch.bfloat16 if recipe.level == "bf16" else None, cache=cache)


def with_evaluation(plan: dict, compiled: dict, rows_per_chip: int) -> dict:
    """The evaluation's figures beside the step's: the slice fits the run only where both do."""
    compiler = plan["compiler"]
    fits = compiled["peak_bytes"] <= plan["usable_hbm_bytes"] if compiled["fits"] is None else compiled["fits"]
    compiler["evaluation"] = {"batch_per_chip": rows_per_chip, "fits": fits,
                              **{key: compiled.get(key) for key in ("peak_bytes", "parts", "compile_seconds", "said")}}
    compiler["step_fits"] = compiler["fits"]
    compiler["fits"] = compiler["fits"] and fits
    return plan


def with_compiler(plan: dict, compiled: dict, chip) -> dict:
    """The compiler's figures beside the estimate, and the step's roofline time from them: under accumulation the
    scan's body (one micro-batch) times the micro-batches, the update counted that often too (a slight overestimate)."""
    trips = compiled.get("micro_batches", 1)  # an answer cached before accumulation compiled has none
    roofline = trips * max(compiled["flops"] / chip.peak_bf16_flops, compiled["bytes_accessed"] / chip.hbm_bytes_per_second) \
        if compiled["flops"] is not None else None
    fits = compiled["peak_bytes"] <= plan["usable_hbm_bytes"] if compiled["fits"] is None else compiled["fits"]
    estimated = plan["estimate"]["peak_bytes"]
    plan["compiler"] = {**compiled, "fits": fits, "roofline_step_seconds": roofline,
                        "estimate_over_compiler": None if estimated is None else estimated / compiled["peak_bytes"]}
    if roofline is not None:  # the step's time: the slower of the MFU time and the compiler's roofline
        step = plan["step"]
        plan["step"] = timing.step(step["model_flops_per_chip"], None, chip, step["mfu"], roofline)
    return plan
