"""plan.py's command line: what a run needs per chip on each TPU named, whether it fits, how long and what it costs.

`python plan.py --tpu v5e-1,v5e-8,v6e-8 [train.py's flags]`: the estimate (planning/estimate.py) from the model's
config alone, in seconds, torch_xla not needed. `--compile` adds the TPU compiler's own answer for the step the run
would execute (xla/tpu_compile.py, the `plan` extra): minutes a target. Bad input is one line naming the field, exit
status 2, nothing written.
"""

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .cli import build_parser, unknown_flag
from .config import ConfigError, TrainConfig, UserError
from .models.modeling import check_positions
from .plan_compile import add_compiles, compiler_problem
from .plan_rehearsal import add_rehearsals, rehearsal_lines, rehearsal_problem, rehearsal_refusal
from .planning import estimate, rehearsed, targets, timing
from .planning.table import notes, table


@dataclass
class PlanOptions:
    tpu: str = field(default="v5e-1,v5e-8,v6e-8", metadata={"help": "TPU slices to plan for, comma-separated, side by "
                     "side: a generation and its number as Google names slices (v5e-8 = 8 chips; v4-8 and v5p-8 count "
                     "TensorCores: 4 chips)."})
    price_per_chip_hour: float | None = field(default=None, metadata={"help": "US dollars per chip-hour. Default: "
                                              "each generation's on-demand list price (planning/targets.py: read "
                                              f"{targets.PRICES_READ}; prices change)."})
    mfu: float = field(default=0.4, metadata={"help": "The share of the chip's peak bf16 FLOP/s a step is assumed "
                       "to reach (model FLOPs utilisation): the step time the run's hours follow from."})
    train_examples: int | None = field(default=None, metadata={"help": "Training examples in an epoch (causal LM: "
                                       "blocks of max_seq_length tokens). Default: the default data set's."})
    eval_examples: int | None = field(default=None, metadata={"help": "Examples in an evaluation (causal LM: blocks), "
                                      "run once an epoch and every --eval_steps. Default: the default data set's."})
    compile: bool = field(default=False, metadata={"help": "Also compile the step for each TPU with its own compiler, "
                          "here, without a TPU (needs the plan extra; minutes a TPU)."})
    rehearse: bool = field(default=False, metadata={"help": "Also stage the run on this machine's XLA:CPU (nothing "
                           "run, no weight read) and compile each graph it hands a TPU with the TPU's compiler: peak "
                           "HBM, compile seconds (the plan extra; minutes at full size)."})
    compile_cache: str | None = field(default=None, metadata={"help": "Folder where --compile keeps the compiler's "
                                      "answers (JSON), so that the same plan asked again is instant; a folder shared "
                                      "by a team shares them. --rehearse keeps each slice's answer there too, which "
                                      "a run of the same recipe reads at its start from the default folder. Default: "
                                      "$XDG_CACHE_HOME or ~/.cache, then {{ cookiecutter.project_slug }}-plans."})


def parse(argv=None) -> tuple[TrainConfig, PlanOptions]:
    parser = build_parser(PlanOptions)
    parser.prog = "plan.py"
    try:
        config, options, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ConfigError as error:
        parser.error(str(error))
    if remaining:
        parser.error(unknown_flag(parser, remaining))
    return config, options


def recipe_of(config: TrainConfig, task) -> estimate.Recipe:
    from .config.defaults import TRAIN_BATCH_SIZE
    from .precision.levels import requested_level

    return estimate.Recipe.of(config, config.train_batch_size or TRAIN_BATCH_SIZE, requested_level(config.precision),
                              config.parallelism, task.NAME)


def run_model(config: TrainConfig, recipe: estimate.Recipe):
    """The model the run trains, on the meta device: the task's architecture, LoRA's adapters, the level's dtype, and
    --gradient_checkpointing's recomputed layers (transformers' switch; the JAX step recomputes them, xla/jax_step.py)."""
    import torch

    from .models import lora
    from .models.modeling import make_graph_friendly
    from .tasks import task

    model = make_graph_friendly(task.build_shape(config))
    model = lora.add_adapters(model, config.model)
    if recipe.frozen_bf16:  # as the run holds it (loop/preparation.py)
        lora.frozen_to_bf16(model)
    if config.gradient_checkpointing:
        model.activation_checkpointing_enable()
    return model.to(torch.bfloat16) if recipe.weight_bytes == 2 else model


def compile_cache(options: PlanOptions) -> Path:
    """Where the TPU compiler's answers are kept (JSON, read back as data only): --compile_cache, else XDG_CACHE_HOME
    or ~/.cache."""
    return Path(options.compile_cache) if options.compile_cache else rehearsed.default_cache()


def plan_target(model, config, options, recipe, target, train_examples: int, eval_examples: int) -> dict:
    """One slice's column: the estimate per device (a chip; half a TPU7x chip), the step's and the run's time, the cost."""
    from .watch.flops import model_flops_per_token

    chip, devices = target.chip, target.devices
    usable = chip.usable_hbm_bytes
    memory = estimate.memory(model, recipe, devices, usable)
    per_token = model_flops_per_token(model, recipe.length)
    flops = per_token * recipe.length * recipe.per_chip_batch
    global_batch = recipe.per_chip_batch * devices * config.gradient_accumulation_steps
    per_epoch = math.ceil(train_examples / global_batch)
    steps = per_epoch * config.num_epochs
    if config.max_steps:
        steps = min(steps, config.max_steps)
    epochs = math.ceil(steps / per_epoch)  # each evaluates once at its end (--max_steps may end the run sooner)
    price = options.price_per_chip_hour if options.price_per_chip_hour is not None else chip.price_per_chip_hour
    fits = None if memory["peak_bytes"] is None else memory["peak_bytes"] <= usable
    return {
        "chips": target.chips, "devices": devices, "chips_per_host": target.chips_per_host,
        "usable_hbm_bytes": usable, "hbm_bytes": chip.hbm_bytes, "fits": fits,
        "estimate": {**memory, "activations_checkpointed": None if fits is None else
                     estimate.activations(model, recipe, devices, checkpointing=True),
                     "largest_batch": estimate.largest_batch(model, recipe, devices, usable)},
        "step": timing.step(flops, estimate.step_bytes(memory["parts"]), chip, options.mfu),
        # A forward pass: a third of a step's FLOPs a token (2N + 4LHQT of 6N + 12LHQT), the weights read once a batch.
        "evaluation": timing.evaluation(per_token * recipe.length / 3, memory["parts"]["weights"], chip, options.mfu,
                                        eval_examples, config.per_chip_eval_batch(recipe.per_chip_batch), devices),
        "run": {"optimizer_steps": steps, "evaluations": epochs + (steps // config.eval_steps if config.eval_steps else 0),
                "price_per_chip_hour": price,
                "price_source": "--price_per_chip_hour" if options.price_per_chip_hour is not None else
                f"on-demand list price, {chip.price_region}, read {targets.PRICES_READ}" if price is not None else
                f"{chip.price_region}: give --price_per_chip_hour"},
        "compiler": None, "compiler_why": chip.no_compiler,
    }


def run_time(config, plan: dict) -> None:
    """The slice's run: hours from its step, evaluations and compiles (the TPU compiler's or a rehearsal's seconds where
    known, else assumed), chip-hours and cost."""
    run, compiled, rehearsal = plan["run"], plan["compiler"], plan.get("rehearsal")
    if rehearsal:
        seconds, source = rehearsal["compile_seconds_whole_run"], "the rehearsal's graphs on the TPU compiler"
    elif compiled:
        seconds = compiled["compile_seconds"] + compiled["evaluation"]["compile_seconds"]
        source = "the TPU compiler's for the training step and the evaluation"
    else:
        seconds, source = 2 * timing.ASSUMED_COMPILE_SECONDS, (f"assumed: {timing.ASSUMED_COMPILE_SECONDS} s a graph, "
                                                               "the training step's and the evaluation's")
    run.update(timing.run(run["optimizer_steps"], config.gradient_accumulation_steps, plan["step"]["seconds"],
                          run["evaluations"], plan["evaluation"]["seconds"], seconds, source))
    run["chip_hours"] = run["hours"] * plan["chips"]
    run["cost"] = None if run["price_per_chip_hour"] is None else run["chip_hours"] * run["price_per_chip_hour"]


def make_plan(config: TrainConfig, options: PlanOptions, say=print, argv=None) -> dict:
    from .tasks import task

    chosen = targets.parse(options.tpu)
    recipe = recipe_of(config, task)
    if options.mfu <= 0 or options.mfu > 1:
        raise ConfigError(f"mfu={options.mfu}: a share of the chip's peak, above 0 and at most 1")
    for name in ("train_examples", "eval_examples"):
        if getattr(options, name) is not None and getattr(options, name) < 1:
            raise ConfigError(f"{name}={getattr(options, name)}: a number of examples, at least 1")
    if options.compile_cache and Path(options.compile_cache).exists() and not Path(options.compile_cache).is_dir():
        raise ConfigError(f"compile_cache={options.compile_cache}: not a folder")
    if options.compile and (problem := compiler_problem(config)):
        raise ConfigError(problem)
    if options.rehearse and (problem := rehearsal_problem()):
        raise ConfigError(problem)
    model = run_model(config, recipe)
    check_positions(model, recipe.length)  # past the model's positions: one line, before any figure or compile
    train_examples = options.train_examples or task.default_train_examples(recipe.length)
    eval_examples = options.eval_examples or task.default_eval_examples(recipe.length)
    report = {
        "model": config.model_name_or_path, "task": task.NAME,
        "recipe": {**vars(recipe), "gradient_accumulation_steps": config.gradient_accumulation_steps,
                   "lora_r": config.lora_r, "num_epochs": config.num_epochs, "max_steps": config.max_steps,
                   "train_examples": train_examples, "eval_examples": eval_examples,
                   "eval_batch_size": config.per_chip_eval_batch(recipe.per_chip_batch), "eval_steps": config.eval_steps, "mfu": options.mfu},
        "targets": {},
    }
    for target in chosen:
        report["targets"][target.name] = plan_target(model, config, options, recipe, target, train_examples,
                                                     eval_examples)
    compilable = [target for target in chosen if not target.chip.no_compiler]  # the others' columns say why
    if options.compile:
        add_compiles(report, compilable, model, config, recipe, compile_cache(options), say)
    if options.rehearse and compilable:
        cache = compile_cache(options)
        add_rehearsals(report, compilable, cache, list(sys.argv[1:] if argv is None else argv), say)
        key = rehearsed.recipe_key(model, recipe, config)  # kept for a run of the same recipe to read at its start
        for target in compilable:
            rehearsed.record(cache, key, target, report["targets"][target.name]["rehearsal"])
    for target in report["targets"].values():
        run_time(config, target)
    return report


def main(argv=None) -> int:
    config, options = parse(argv)
    try:
        report = make_plan(config, options, argv=argv)
    except UserError as error:  # every known problem (config/errors.py): one line, nothing written
        print(f"{error.said_as}: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    recipe = report["recipe"]
    print(f"Plan: {report['model']} ({report['task']}), {recipe['per_chip_batch']} x {recipe['length']} per device, "
          f"{recipe['level']}, {recipe['layout']} layout, {recipe['optimizer']}, "
          f"{recipe['train_examples']} examples x {recipe['num_epochs']} epochs")
    print(table(report))
    for line in notes(report, options.compile or options.rehearse) + rehearsal_lines(report):
        print(line)
    if config.report:
        Path(config.report).write_text(json.dumps(report, indent=2) + "\n")
        print(f"plan written to {config.report}")
    if refused := rehearsal_refusal(report):  # after the table and the report: the figures say why
        print(refused, file=sys.stderr)
        raise SystemExit(3)
    return 0
