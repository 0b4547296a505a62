"""Everything a run trains with, built in order and prepared by the layout: data, model, loaders, optimizer, schedule.

The task (tasks/) says how examples are loaded and batched and which model is built; the batching policy
(data/batching.py) gives every batch one shape; the layout (parallel/) places the model and the batches.
"""

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import DEMO_GLOBAL_BATCH, ConfigError
from ..data import batching
from ..data.preparation import timed
from ..launch.main_process import main_process_first
from ..models import lora
from ..models.modeling import check_positions, make_graph_friendly
from ..planning import estimate, rehearsed, start_check
from ..precision import bf16_updates
from ..precision import levels as precision
from ..tasks import task
from ..watch.flops import chip_generation
from ..xla import device as devices
from . import optimizers
from .context import RunContext


@dataclass
class Prepared:
    model: object
    optimizer: object
    scheduler: object
    train_loader: object
    eval_loader: object
    tokenizer: object
    data: object  # the task's TextData: where the examples came from
    train_examples: object
    collator: object
    steps_per_epoch: int
    train_batch_size: int  # per chip and micro-batch (config.per_chip_train_batch)
    replicas: int  # chips (or processes) whose batches make one optimizer step
    accumulation: int  # micro-batches per chip in one optimizer step (--gradient_accumulation_steps)
    optimizer_steps: int  # of the whole run
    clip: Callable | None  # clips the gradients in the step (the layout's clip at --max_grad_norm); None: no clipping
    whole_step: Callable | None = None  # the JAX step: the step as one JAX function (xla/jax_step.py)
    data_preparation: dict | None = None  # this process's seconds preparing the examples, and whether all were cached
    steps_per_call: int = 1  # optimizer steps in the next call of the JAX step (the loop sets it: loop/calls.py)
    whole_eval: Callable | None = None  # with the JAX step: the eval batch as one JAX function (xla/jax_eval.py)

    @property
    def epochs(self) -> int:
        """The epochs the run reaches: its last one may end early, at --max_steps."""
        return math.ceil(self.optimizer_steps / self.steps_per_epoch)

    @property
    def global_batch(self) -> int:
        """One optimizer step's examples: per chip x chips x micro-batches."""
        return self.train_batch_size * self.replicas * self.accumulation


def prepare(context: RunContext, model=None) -> Prepared:
    """Load the task's examples, build the model unless one was passed in, and hand everything to the layout."""
    accelerator, layout, config, demo, say = context.accelerator, context.layout, context.config, context.demo, context.say
    precision_report = context.precision
    with main_process_first(accelerator):  # the others read what the main process prepared (data/preparation.py)
        examples, seconds, cached = timed(lambda: task.load_examples(config, demo))
    data, tokenizer, train_examples, eval_examples = examples
    if model is None:
        model = task.build_model(config, demo, vocab_size=len(tokenizer))
    say(f"data: {data.source}, {data.format}: {task.loss_covers(data.format)}")
    say(f"data: prepared in {seconds:.1f} s" + (" (read from the cache)" if cached else ""))
    check_positions(model, config.max_seq_length)  # before anything compiles: XLA clamps a read past the table
    model = lora.add_adapters(make_graph_friendly(model), config.model)  # unchanged without lora_r
    if config.model.frozen_in_bf16(precision_report.effective):
        say(lora.frozen_to_bf16(model))
        precision_report.stored = {**precision_report.stored, "weights": "float32 trained, the frozen base bf16 (LoRA)"}
    learning_rate = config.resolved_learning_rate(demo)
    if precision_report.effective.startswith("pure-") and not precision_report.kahan_summation:
        precision_report.updates_at_risk = bf16_updates.updates_at_risk(model, learning_rate)
        if precision_report.updates_at_risk["fraction_of_elements"] > 0:
            say(bf16_updates.warning(precision_report.effective, precision_report.updates_at_risk))
    if precision_report.effective != precision_report.requested:  # a fallback (the XLA variables did not apply)
        say(f"precision: {precision_report.verified}")
    replicas = layout.replicas(accelerator)  # chips (fsdp) or processes (data) sharing one optimizer step
    batch_size, accumulation = config.per_chip_train_batch(demo, replicas), config.gradient_accumulation_steps
    # Before anything reaches the device: a step that cannot fit stops here, not after minutes of compiling.
    recipe = estimate.Recipe.of(config, batch_size, precision_report.effective, layout.name, task.NAME)
    # plan.py --rehearse's answer for this recipe on this slice, where it kept one: rehearsed as one program over the
    # chips, as a single process (or fsdp's one per host) runs it; Accelerate's process per chip is not rehearsed.
    # Off a TPU VM (no generation) nothing is looked up, and the recipe's hash is not computed.
    generation = chip_generation() if accelerator.num_processes == 1 or layout.name == "fsdp" else None
    rehearsal = rehearsed.lookup(rehearsed.default_cache(), rehearsed.recipe_key(model, recipe, config), generation,
                                 replicas) if generation else None
    eval_batch = config.per_chip_eval_batch(batch_size)
    lines, problem = start_check.check_at_start(model, recipe, replicas, devices.memory_per_chip(accelerator.device),
                                                rehearsal, eval_batch)
    for line in lines:
        say(line)
    if problem:
        raise ConfigError(problem)
    model = layout.wrap(precision.apply_to_model(model, precision_report, accelerator.device))

    collator = task.make_collator(tokenizer, config.padding, config.max_seq_length)
    if layout.name == "fsdp" and replicas == 1:
        say("fsdp: the mesh has 1 device, so nothing is sharded (on the CPU, CPU_NUM_DEVICES=N gives N XLA devices; "
            "on a TPU every chip joins the mesh)")
    global_batch = batch_size * replicas * accumulation  # Prepared.global_batch
    if demo and config.train_batch_size is None and global_batch != DEMO_GLOBAL_BATCH:
        say(f"demo: its global batch of {DEMO_GLOBAL_BATCH} does not split evenly over {replicas} chips x "
            f"{accumulation} micro-batches; {batch_size} per chip, {global_batch} in all")
    # A loader batch is one optimizer step's micro-batches for one chip (data) or all of a host's chips (fsdp): the
    # step splits it (data/batching.py), so the sampler, resuming and the schedule count optimizer steps.
    per_loader = layout.devices_per_process()
    train_loader = task.train_loader(train_examples, collator, batch_size * per_loader * accumulation, config)
    eval_loader = batching.eval_loader(
        eval_examples, collator, eval_batch * per_loader, layout.loader_shards(accelerator)
    )
    # Trainable parameters only: with LoRA the frozen base gets no optimizer state (models/lora.py). Biases and
    # normalization weights are not decayed, as in transformers' Trainer (optimizers.parameter_groups).
    optimizer = optimizers.make_optimizer(
        config.optim, optimizers.parameter_groups(model, config.weight_decay), learning_rate, config.weight_decay,
        precision_report.kahan_summation,
    )
    counted = task.train_count(train_examples, config)
    steps_per_epoch = config.max_steps if counted is None else counted // global_batch  # a stream: one epoch
    if steps_per_epoch == 0:
        times = f" x gradient_accumulation_steps={accumulation}" if accumulation > 1 else ""
        raise ConfigError(
            f"train_batch_size={batch_size}{times}: larger than the {counted} training examples "
            f"shared by {replicas} {'chips' if layout.name == 'fsdp' else 'process(es)'}; lower it"
        )
    optimizer_steps = steps_per_epoch * config.num_epochs
    if config.max_steps:  # it ends the run sooner than --num_epochs would (the schedule and checkpoints follow), never later
        optimizer_steps = min(optimizer_steps, config.max_steps)
    from transformers import get_scheduler

    # Sized in the scheduler's own calls: Accelerate's prepared scheduler (data) steps the one it wraps
    # num_processes times per optimizer step, so a schedule sized in optimizer steps would reach 0 early.
    # Any learning rate, 0 included, is the same graph (the optimizer takes it as data: loop/optimizers.py).
    calls = layout.scheduler_calls_per_step(accelerator)
    scheduler = get_scheduler(
        config.lr_scheduler_type, optimizer,
        num_warmup_steps=config.warmup_for(optimizer_steps) * calls, num_training_steps=optimizer_steps * calls,
    )
    model, optimizer, train_loader, eval_loader, scheduler = layout.prepare(
        accelerator, model, optimizer, train_loader, eval_loader, scheduler
    )
    optimizers.create_state(optimizer)  # the weights are where they train now (Accelerate moved them, FSDPv2 sharded them)
    if len(train_loader) != steps_per_epoch:
        raise RuntimeError(f"Accelerate's loader gives {len(train_loader)} steps per epoch, the schedule expects {steps_per_epoch}")
    clip = functools.partial(layout.clip_gradients, accelerator, model, config.max_grad_norm) if config.max_grad_norm else None
    return Prepared(
        model, optimizer, scheduler, train_loader, eval_loader, tokenizer, data, train_examples, collator,
        steps_per_epoch, batch_size, replicas, accumulation, optimizer_steps, clip,
        whole_step(context, optimizer, accumulation), {"seconds": seconds, "from_cache": cached},
        whole_eval=whole_eval(context),
    )


def whole_eval(context: RunContext):
    """The eval batch as one JAX function wherever the step is one (config/step_function.py chose it); None else."""
    if not context.step.whole:
        return None
    from ..xla.jax_eval import WholeEval

    autocast = torch.bfloat16 if context.precision.autocast else None
    return WholeEval(context.layout.plain_model(context.accelerator), task.eval_batch,
                     precision.metric_dtype(context.precision), autocast)


def whole_step(context: RunContext, optimizer, accumulation: int):
    """The step as one JAX function over the layout's plain model (config/step_function.py chose it); None for the
    lazy step."""
    if not context.step.whole:
        return None
    from ..xla.jax_step import WholeStep

    autocast = torch.bfloat16 if context.precision.autocast else None
    return WholeStep(context.layout.plain_model(context.accelerator), optimizer, context.config.max_grad_norm or None,
                     autocast, accumulation)
