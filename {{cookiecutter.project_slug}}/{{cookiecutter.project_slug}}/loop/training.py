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
from ..data.batching import shuffle_config
from ..data.sources import wants_demo
from ..fault_tolerance import output_folder, resume, run_lock
from ..fault_tolerance.checkpoint_schedule import Checkpoints, facts
from ..fault_tolerance.loss_guard import LossGuard
from ..fault_tolerance.preemption import Preemption
from ..launch import environment, processes
from ..launch.hosts import process_label
from ..parallel import layout_for
from ..precision import levels as precision
from ..precision.fixed_point import from_fixed
{%- if cookiecutter.task == "causal-lm" %}
from ..tasks import samples, task
{%- else %}
from ..tasks import task
{%- endif %}
from ..watch import compilations, compile_analysis, curves
from ..watch.graph_watch import GraphWatch
from ..watch.metrics_log import MetricsLog
from ..watch.step_profile import StepProfile
from ..xla import compilation as xla_compilation
from ..xla import device as devices
from ..xla import runtime as xla_runtime
from . import best_model, collector, export
from .callbacks import Callbacks
from .evaluation import evaluate
from .optimizers import takes_python_scalars
from .preparation import prepare
from .report import format_table, run_report, write_report
from .run_state import RunState
from .step import train_step


def training_function(model=None, config: TrainConfig | None = None) -> dict:
    """Train and evaluate; return the report. Builds the model only when none is passed in."""
    config = config or TrainConfig()  # the libraries' objects out of full collections; the lock removed at any end
    with collector.earlier_objects_frozen(), run_lock.RunLock(config.output_dir) as lock:
        return _training_function(model, config, lock)


def _training_function(model, config: TrainConfig, lock: run_lock.RunLock) -> dict:
    environment.check_stack()
    environment.check_tracker(config.report_to)
    made_output_dir = output_folder.claim(config, lock)  # refused if in use or used; removed if this run is refused
    level = precision.requested_level(config)
    layout = layout_for(config)
    # All four must happen before the first tensor reaches an XLA device in this process.
    cache_dir = compilations.init_compilation_cache(f"{config.output_dir}/xla-cache") if config.compilation_cache else None
    analysis_file = None
    if environment.xla_installed():
        if config.step_function == "lazy":
            xla_runtime.keep_torchax_out()  # torchax, once imported, passes for torch's accelerator (xla/runtime.py)
        precision.set_xla_variables(level)
        if takes_python_scalars(config.optim, config.kahan_summation):
            xla_compilation.scalars_as_data()  # a learning rate of 0 (warm-up) or of any size is the same graph
        if config.watch_compilations:
            analysis_file = compile_analysis.enable_analysis(Path(config.output_dir) / "xla-compilations", process_label())
    layout.start()
    lock.take_on_first_host()  # fsdp: the hosts are known now, host 0 takes the lock for the run
    processes.wait_for_forked_siblings()  # before the Accelerator joins the rendezvous (a fork's hang: processes.py)

    from accelerate import Accelerator
    from accelerate.utils import set_seed

    accelerator = Accelerator(
        mixed_precision="no",  # the level is the project's (precision/levels.py), never Accelerate's
        cpu=not environment.xla_installed() and not torch.cuda.is_available(),
        dataloader_config=shuffle_config(config.seed),
        log_with=None if config.report_to == "none" else config.report_to,  # the metrics log's trackers
        project_dir=config.output_dir,
    )
    set_seed(config.seed)
    processes.quiet_unless_main(accelerator)
    with compilations.counting_compilations() as compiled:
        precision_report = precision.realise(level, accelerator.device, config.kahan_summation)
        report, tokenizer, data = _train(accelerator, layout, model, config, precision_report, analysis_file, made_output_dir)
    report.update(
        xla_compilations=compiled["compilations"],
        compile_seconds=compiled["compile_seconds"],
        device_to_host_transfers=compiled["device_to_host_transfers"],
        compilation_cache={"enabled": False} if cache_dir is None else {
            "enabled": True, "folder": str(cache_dir), "hits": compiled["cache_hits"], "misses": compiled["cache_misses"],
            "read_failures": compiled["cache_read_failures"], "what_it_did": compilations.cache_summary(
                compiled["cache_hits"], compiled["cache_misses"], compiled["cache_read_failures"]),
        },
    )
    if config.export:
        # After the counting: bringing the weights to the host (read back from shards under fsdp) is not training's.
        report["exported"] = export.export(accelerator, layout, tokenizer, config, report)
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
    # The trained model, optimizer and loaders are released while the process group still exists: DDP's reducer holds
    # it, and torch's gloo group, destroyed after Accelerate's end_training, can wait forever (seen once: a hang).
    layout.release()
    accelerator.free_memory()
    accelerator.end_training()
    return report


def _train(accelerator, layout, model, config: TrainConfig, precision_report, analysis_file, made_output_dir: bool):
    """(report, tokenizer, data): build the run's parts and state, its callbacks, and fit."""
    say = processes.say_once(accelerator)
    demo = processes.main_process_decides(accelerator, lambda: wants_demo(config))
    with output_folder.removed_if_refused(config.output_dir, made_output_dir):
        parts = prepare(accelerator, layout, model, config, demo, precision_report, say)
    run = RunState(parts.steps_per_epoch, parts.global_batch, parts.epochs, parts.optimizer_steps, config.eval_steps)
    guard = LossGuard(accelerator, precision_report.effective, config.resolved_learning_rate(demo), config.output_dir)
    settings = resume.settings_of(config, facts(task.NAME, config, demo, precision_report, parts))
    checkpoints = Checkpoints(accelerator, layout, config, say, guard, parts, settings)
    watching = devices.uses_xla(accelerator.device) and config.watch_compilations
    watch = GraphWatch(config.padding, config.max_recompilations, say, analysis_file) if watching else None
    metrics = MetricsLog(accelerator, guard, config, parts.replicas, parts.steps_per_epoch)
    profile = None
    if config.profile_steps and not devices.uses_xla(accelerator.device):
        say("profile_steps: no XLA device in this run, so no trace (torch_xla's profiler traces XLA devices)")
    elif config.profile_steps and processes.is_main(accelerator):
        profile = StepProfile(config.profile_steps, config.output_dir, accelerator.device)
    # In this order: the watch sees what a checkpoint compiled, a preempted run stops after its checkpoint, and the
    # metrics log, the profile and the best model start after a resumed run's step and best evaluation are known.
    best = best_model.BestModel(accelerator, layout, config, say)
    callbacks = Callbacks(checkpoints, watch, Preemption(accelerator, checkpoints), metrics, profile, best)
    fit(accelerator, parts, run, callbacks, guard, layout, precision.metric_dtype(precision_report), say)
    report = run_report(accelerator, layout, parts, run, config, precision_report, watch, checkpoints, demo)
    if report["host_share_of_step"]["says"].startswith("host-bound"):
        say(report["host_share_of_step"]["says"])
    report.update(logging=metrics.report(), profile=profile.report() if profile else None, **best.report(run))
    if processes.is_main(accelerator):
        # The whole run's picture, resumed parts included: drawn from metrics.jsonl.
        report["curves"] = curves.draw(metrics.path, Path(config.output_dir) / curves.CURVES_FILE)
        say(f"curves: {report['curves']}")
    return report, parts.tokenizer, parts.data


def fit(accelerator, parts, run: RunState, callbacks, guard: LossGuard, layout, metric_dtype, say) -> None:
    """The epoch loop: train, evaluate, and let the callbacks act at the end of each step and epoch.

    `guard` (fault_tolerance/loss_guard.py) stops the run at its next read of the device when a loss was not finite.
    """

    def evaluate_now() -> dict:
        """The eval set's metrics now (after an epoch, or every --eval_steps), kept in the run's evaluations."""
        run.evaluation = evaluate(
            accelerator, parts.model, layout.eval_batches(parts.eval_loader), metric_dtype,
            on_step=lambda step, batch: callbacks.after_eval_step(run, step, batch),
        )
        guard.check_evaluation(run, run.evaluation)  # a NaN stops the run before the epoch's checkpoint
        callbacks.after_evaluation(run)
        run.evaluations.append({"epoch": run.epoch + 1, "global_step": run.global_step, **run.evaluation})
        return run.evaluation

    try:
        callbacks.on_fit_start(run)  # a resumed run's position comes from its checkpoint here
        run.first_learning_rate = parts.scheduler.get_last_lr()[0]
        for epoch in range(run.first_epoch, run.num_epochs):
            if run.reached_the_end(epoch) or run.stop_reason:  # resumed after --max_steps or an early stop
                break
            skip = run.begin_epoch(epoch)
            batches = layout.train_batches(accelerator, parts.train_loader, epoch, skip)
            run.train_loss = train_epoch(accelerator, parts, run, batches, callbacks, guard, evaluate_now, say)
            run.end_training_part(skip)
            if not run.stop_reason:  # else an --eval_steps evaluation stopped it: the weights are the ones it evaluated
                evaluate_now()
            say(f"epoch {epoch + 1}/{run.num_epochs}: train loss {run.train_loss:.4f}, {task.summary(run.evaluation)}")
            callbacks.at_epoch_end(run)
            run.record_compilations()
    finally:
        callbacks.on_fit_end(run)


def train_epoch(accelerator, parts, run: RunState, batches, callbacks, guard: LossGuard, evaluate_now=None,
                say=print) -> float:
    """One epoch's optimizer steps (a resumed epoch's remaining ones, up to --max_steps); returns its mean loss.

    Every --eval_steps optimizer steps, `evaluate_now()` evaluates inside the epoch (not at its last step: the
    epoch's own evaluation follows).
    """
    parts.model.train()
    guard.begin_epoch(run, run.resumed_loss if run.step else 0)
    steps = min(len(batches), run.last_step - run.global_step)
    if steps == 0 < len(batches):  # resumed after the run's last step (--max_steps) inside this epoch: nothing to train
        batches = ()
    # The bar is not given the loader: tqdm.auto's bar calls iter() on what it wraps, and each iter() of Accelerate's
    # XLA loader starts a prefetch thread that may finish the epoch and advance the shuffle's epoch counter before the
    # real pass starts (another data order in every run). A context: a run stopped mid-epoch ends the bar's line first.
    bar = tqdm(total=run.step + steps, initial=run.step, desc=f"epoch {run.epoch + 1}/{run.num_epochs}",
               disable=not processes.is_main(accelerator))
    with bar:
        for index, batch in enumerate(batches, start=1):
            run.last_learning_rate = parts.scheduler.get_last_lr()[0]
            step = train_step(accelerator, parts.model, parts.optimizer, parts.scheduler, batch, parts.clip,
                              parts.accumulation, run.tracing, parts.whole_step)
            guard.add(step.loss)
            run.grad_norm = step.grad_norm
            run.after_step()
            callbacks.before_sync(run)
            run.tracing.handed_over()
            devices.sync(accelerator.device)
            callbacks.after_train_step(run, batch)  # the metrics log hands what it reads to its own thread
            if run.shown:
                bar.set_postfix(run.shown, refresh=False)
            bar.update()
            if run.eval_steps and run.global_step % run.eval_steps == 0 and index < steps:
                say(f"step {run.global_step}: {task.summary(evaluate_now())}")
                parts.model.train()
            callbacks.at_step_boundary(run)
            if index == steps < len(batches) or run.stop_reason:  # --max_steps reached inside the epoch, or a stop
                # Only then: a loader left before its end skips its last sync, which moves XLA's random seed.
                break
    # One transfer per epoch, the loss and the guard's counters together: reading every step would stall the device.
    total = guard.read(run)
    return from_fixed(total) / max(run.step * accelerator.num_processes, 1)
