"""The training function shared by train.py and the notebook, and the one training loop.

`training_function(model, config)` creates everything device-related itself, so that a notebook can build
the model in its parent process, touch no device, and hand the model to `notebook_launcher` (the
shared-model pattern). The loop (`fit`, `train_epoch`, `train_step`, `evaluate`) only trains and evaluates;
checkpoints, preemption and the graph watch answer its named points (callbacks.py).
"""

from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..config import TrainConfig
from ..data.batching import VALID, shuffle_config
from ..data.sources import wants_demo
from ..fault_tolerance import checkpointing
from ..fault_tolerance.checkpoint_schedule import Checkpoints
from ..fault_tolerance.loss_guard import LossGuard
from ..fault_tolerance.preemption import Preemption
from ..launch import environment, processes
from ..launch.hosts import process_label
from ..models import lora
from ..parallel import layout_for
from ..precision import levels as precision
from ..precision.fixed_point import from_fixed
{%- if cookiecutter.task == "causal-lm" %}
from ..tasks import samples, task
{%- else %}
from ..tasks import task
{%- endif %}
from ..watch import compilations, compile_analysis
from ..watch.graph_watch import GraphWatch
from ..xla import compilation as xla_compilation
from ..xla import device as devices
from .callbacks import Callbacks
from .preparation import prepare
from .report import format_table, run_report, write_report
from .run_state import RunState


def training_function(model=None, config: TrainConfig | None = None) -> dict:
    """Train and evaluate; return the report. Builds the model only when none is passed in."""
    config = config or TrainConfig()
    environment.check_stack()
    checkpointing.check_writable(config.output_dir, config.report_path)
    level = precision.requested_level(config)
    layout = layout_for(config)
    # All four must happen before the first tensor reaches an XLA device in this process.
    cache_dir = compilations.init_compilation_cache(f"{config.output_dir}/xla-cache") if config.compilation_cache else None
    analysis_file = None
    if environment.xla_installed():
        precision.set_xla_variables(level)
        xla_compilation.scalars_as_data()  # a learning rate of 0 (warm-up) or of any size is the same graph
        if config.watch_compilations:
            analysis_file = compile_analysis.enable_analysis(Path(config.output_dir) / "xla-compilations", process_label())
    layout.start()
    processes.wait_for_forked_siblings()  # before the Accelerator joins the rendezvous (a fork's hang: processes.py)

    from accelerate import Accelerator
    from accelerate.utils import set_seed

    accelerator = Accelerator(
        mixed_precision="no",  # the level is the project's (precision/levels.py), never Accelerate's
        cpu=not environment.xla_installed() and not torch.cuda.is_available(),
        dataloader_config=shuffle_config(config.seed),
    )
    set_seed(config.seed)
    processes.quiet_unless_main(accelerator)
    with compilations.counting_compilations() as compiled:
        precision_report = precision.realise(level, accelerator.device, config.kahan_summation)
        report, tokenizer, data = _train(accelerator, layout, model, config, precision_report, analysis_file)
    report.update(
        xla_compilations=compiled["compilations"],
        compile_seconds=compiled["compile_seconds"],
        device_to_host_transfers=compiled["device_to_host_transfers"],
        compilation_cache=None if cache_dir is None else {
            "folder": str(cache_dir), "hits": compiled["cache_hits"], "misses": compiled["cache_misses"],
            "read_failures": compiled["cache_read_failures"],
        },
    )
    if config.export:
        # After the counting: bringing the weights to the host (read back from shards under fsdp) is not training's.
        report["exported"] = export(accelerator, layout, tokenizer, config)
{%- if cookiecutter.task == "causal-lm" %}
    if config.export and config.samples and processes.is_main(accelerator):
        # From the exported folder, on the host: generation compiles nothing on the device (tasks/samples.py).
        report["samples"] = samples.continue_greedily(
            report["exported"], tokenizer, samples.eval_prompts(data, tokenizer, config.samples)
        )
{%- endif %}
    if processes.is_main(accelerator):
        write_report(report, config.report_path)
        print(format_table(report))
{%- if cookiecutter.task == "causal-lm" %}
        if report.get("samples"):
            print(samples.show(report["samples"]))
{%- endif %}
    processes.barrier(accelerator)
    # The trained model, optimizer and loaders are released while the process group still exists: DDP's reducer
    # holds the group, and torch's gloo group, destroyed after Accelerate's end_training destroyed the group, can
    # wait forever for its worker thread (seen once: a finished 2-process run hung in ~ProcessGroupGloo).
    layout.release()
    accelerator.free_memory()
    accelerator.end_training()
    return report


def export(accelerator, layout, tokenizer, config: TrainConfig) -> str:
    """The trained model as `save_pretrained` writes it (plain names, CPU tensors): `from_pretrained` loads it anywhere.

    Written once, by the main process; with LoRA the folder is peft's adapter folder (with `--merge_lora` also a
    merged model beside it: lora.py).
    """
    folder = Path(config.export_dir)
    # Every process takes part: a sharded model is written by each host and put together on the main one.
    weights = layout.host_state_dict(accelerator, scratch=Path(config.output_dir) / ".export-shards")
    if processes.is_main(accelerator):
        model = layout.plain_model(accelerator)
        if hasattr(model, "peft_config"):
            lora.export_adapters(model, weights, tokenizer, folder, config.merge_lora)
        else:
            model.save_pretrained(folder, state_dict=weights)
            tokenizer.save_pretrained(folder)
    processes.barrier(accelerator)
    return str(folder)


def _train(accelerator, layout, model, config: TrainConfig, precision_report, analysis_file=None):
    """(report, tokenizer, data): build the run's parts and state, its callbacks, and fit."""
    say = processes.say_once(accelerator)
    demo = processes.main_process_decides(accelerator, lambda: wants_demo(config))
    parts = prepare(accelerator, layout, model, config, demo, precision_report, say)
    run = RunState(parts.steps_per_epoch, parts.train_batch_size * parts.replicas, config.num_epochs)
    guard = LossGuard(accelerator, precision_report.effective, config.resolved_learning_rate(demo), config.output_dir)
    checkpoints = Checkpoints(accelerator, layout, config, say, guard)
    watch = None
    if devices.uses_xla(accelerator.device) and config.watch_compilations:
        watch = GraphWatch(config.padding, config.max_recompilations, say, analysis_file)
    # In this order: the watch sees what a checkpoint compiled, and a preempted run stops after its checkpoint.
    callbacks = Callbacks(checkpoints, watch, Preemption(accelerator, checkpoints))
    fit(accelerator, parts, run, callbacks, guard, layout, precision.metric_dtype(precision_report), say)
    report = run_report(accelerator, layout, parts, run, config, precision_report, watch, checkpoints)
    return report, parts.tokenizer, parts.data


def fit(accelerator, parts, run: RunState, callbacks, guard: LossGuard, layout, metric_dtype, say) -> None:
    """The epoch loop: train, evaluate, and let the callbacks act at the end of each step and epoch.

    `guard` (fault_tolerance/loss_guard.py) stops the run at its next read of the device when a loss was not finite.
    """
    try:
        callbacks.on_fit_start(run)  # a resumed run's position comes from its checkpoint here
        run.first_learning_rate = parts.scheduler.get_last_lr()[0]
        for epoch in range(run.first_epoch, run.num_epochs):
            skip = run.begin_epoch(epoch)
            batches = layout.train_batches(accelerator, parts.train_loader, epoch, skip)
            run.train_loss = train_epoch(accelerator, parts, run, batches, callbacks, guard)
            run.end_training_part(skip)
            run.evaluation = evaluate(
                accelerator, parts.model, layout.eval_batches(parts.eval_loader), metric_dtype,
                on_step=lambda step, batch: callbacks.after_eval_step(run, step, batch),
            )
            callbacks.after_evaluation(run)
            say(f"epoch {epoch + 1}/{run.num_epochs}: train loss {run.train_loss:.4f}, {task.summary(run.evaluation)}")
            callbacks.at_epoch_end(run)
            run.record_compilations()
    finally:
        callbacks.on_fit_end(run)


def train_epoch(accelerator, parts, run: RunState, batches, callbacks, guard: LossGuard) -> float:
    """One epoch's optimizer steps (a resumed epoch's remaining ones); returns its mean training loss."""
    parts.model.train()
    guard.begin_epoch(run, run.resumed_loss if run.step else 0)
    # The bar is not given the loader: tqdm.auto's bar calls iter() on what it wraps, and each iter()
    # of Accelerate's XLA loader starts a prefetch thread that may finish the epoch and advance the
    # shuffle's epoch counter before the real pass starts (another data order in every run).
    # A context, so that a run stopped mid-epoch ends the bar's line before its error message.
    bar = tqdm(total=run.step + len(batches), initial=run.step, desc=f"epoch {run.epoch + 1}/{run.num_epochs}",
               disable=not processes.is_main(accelerator))
    with bar:
        for batch in batches:
            run.last_learning_rate = parts.scheduler.get_last_lr()[0]
            guard.add(train_step(accelerator, parts.model, parts.optimizer, parts.scheduler, batch, parts.clip))
            run.after_step()
            devices.sync(accelerator.device)
            callbacks.after_train_step(run, batch)
            bar.update()
            callbacks.at_step_boundary(run)
    # One transfer per epoch, the loss and the guard's counters together: reading every step would stall the device.
    total = guard.read(run)
    return from_fixed(total) / max(run.step * accelerator.num_processes, 1)


def train_step(accelerator, model, optimizer, scheduler, batch, clip=None):
    """One optimizer step; returns the loss, detached and still lazy (the caller decides when to sync).

    `clip()` clips the gradients between the backward pass and the update (Prepared.clip). Separate from the epoch
    loop so that the benchmarks time exactly this step.
    """
    batch.pop(VALID, None)
    loss = model(**batch).loss
    accelerator.backward(loss)
    if clip is not None:
        clip()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.detach()


def evaluate(accelerator, model, loader, metric_dtype=torch.float32, on_step=None) -> dict:
    """The task's metrics over real examples only (masked copies count for nothing), summed on the device.

    Every sum is a whole number (the loss in fixed point), so the result is exact in every precision level.
    `on_step(step, batch)` runs after each synced step (the graph watch).
    """
    model.eval()
    device = accelerator.device
    counts = devices.device_zeros(len(task.COUNTS), torch.int64, device)
    for step, batch in enumerate(loader, start=1):
        valid = batch.pop(VALID)
        with torch.no_grad():
            counts += task.eval_batch(model, batch, valid, metric_dtype)
        devices.sync(device)
        if on_step:
            on_step(step, batch)
    counts = processes.sum_over_processes(accelerator, counts).tolist()
    return task.metrics(dict(zip(task.COUNTS, counts, strict=True)))
