"""The training function shared by train.py and the notebook: it builds a run and hands it to the one loop (fit.py).

`training_function(model, config)` creates everything device-related itself, so that a notebook can build
the model in its parent process, touch no device, and hand the model to `notebook_launcher` (the
shared-model pattern). It builds the run's context (context.py), parts (preparation.py), state (run_state.py) and
callbacks (callbacks.py), runs `Loop.fit`, and writes the report (report.py) and the export (export.py).
"""

from dataclasses import asdict
from pathlib import Path

import torch

from ..config import TrainConfig, step_function
from ..data.batching import shuffle_config
from ..data.sources import wants_demo
from ..fault_tolerance import output_folder, resume, run_lock
from ..fault_tolerance.checkpoint_schedule import Checkpoints, facts
from ..fault_tolerance.loss_guard import LossGuard
from ..fault_tolerance.preemption import Preemption
from ..launch import environment, main_process, processes
from ..launch.hosts import process_label
from ..parallel import layout_for
from ..precision import levels as precision
from ..tasks import task
from ..watch import compilations, compile_analysis, curves
from ..watch.graph_watch import GraphWatch
from ..watch.metrics_log import MetricsLog
from ..watch.step_profile import StepProfile
from ..xla import compilation as xla_compilation
from ..xla import device as devices
from ..xla import runtime as xla_runtime
from . import best_model, collector, export
from .callbacks import Callbacks
from .calls import Calls, chip_seconds_per_step
from .context import RunContext
from .fit import Loop
from .optimizers import takes_python_scalars
from .preparation import prepare
from .report import format_table, run_report, write_report
from .run_state import RunState


def training_function(model=None, config: TrainConfig | None = None) -> dict:
    """Train and evaluate; return the report. Builds the model only when none is passed in."""
    config = config or TrainConfig()  # the libraries' objects out of full collections; the lock removed at any end
    with collector.earlier_objects_frozen(), run_lock.RunLock(config.output_dir) as lock:
        return _training_function(model, config, lock)


def _training_function(model, config: TrainConfig, lock: run_lock.RunLock) -> dict:
    environment.check_stack()
    environment.check_tracker(config.report_to)
    made_output_dir = output_folder.claim(config.checkpoints, config.parallel, lock)  # refused if in use or used; removed if this run is refused
    level = precision.requested_level(config.precision)
    layout = layout_for(config.parallel, config.model)
    # All four must happen before the first tensor reaches an XLA device in this process.
    cache_dir = compilations.init_compilation_cache(f"{config.output_dir}/xla-cache") if config.compilation_cache else None
    analysis_file = None
    if environment.xla_installed():
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
    found = step_function.Found(on_xla=devices.uses_xla(accelerator.device), layout=layout.name,
                                processes=accelerator.num_processes, device=devices.device_kind(accelerator.device),
                                level=level)
    with output_folder.removed_if_refused(config.output_dir, made_output_dir):  # an explicit jax that cannot run
        step = step_function.choose(config, found)
    if environment.xla_installed() and not step.whole:
        # Before the first mark_sharding, which imports torchax: once imported it passes for torch's accelerator.
        xla_runtime.keep_torchax_out()
    with compilations.counting_compilations() as compiled:
        context = RunContext(
            accelerator, layout, config, precision.realise(level, accelerator.device, config.kahan_summation), step,
            say=processes.say_once(accelerator), demo=main_process.main_process_decides(accelerator, lambda: wants_demo(config.data, config.model)),
        )
        report, tokenizer, data = _train(context, model, analysis_file, made_output_dir)
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
    if processes.is_main(accelerator):
        shown = task.after_export(report, tokenizer, data, config)  # the exported model's own output, if the task has one
        write_report(report, config.report_path)
        print(format_table(report))
        if shown:
            print(shown)
    processes.barrier(accelerator)
    # The trained model, optimizer and loaders are released while the process group still exists: DDP's reducer holds
    # it, and torch's gloo group, destroyed after Accelerate's end_training, can wait forever (seen once: a hang).
    layout.release()
    accelerator.free_memory()
    accelerator.end_training()
    return report


def _train(context: RunContext, model, analysis_file, made_output_dir: bool):
    """(report, tokenizer, data): build the run's parts and state, its callbacks, and fit."""
    accelerator, layout, config, demo, say = context.accelerator, context.layout, context.config, context.demo, context.say
    precision_report = context.precision
    step = context.step
    say(f"step_function: {step.name}" + (f" (auto: {step.why})" if step.why else
                                         " (the whole step as one JAX function)" if step.whole else " (asked for)"))
    say(f"steps_per_execution: {step.steps or 'auto'} ({step.steps_why})")
    if (logging := step_function.rounded_logging_steps(config.logging_steps, step.steps)) != config.logging_steps:
        say(f"logging_steps: {logging}, not {config.logging_steps}: logs fall between calls of {step.steps} steps")
        config.logging_steps = logging
    with output_folder.removed_if_refused(config.output_dir, made_output_dir):
        parts = prepare(context, model)
    run = RunState(parts.steps_per_epoch, parts.global_batch, parts.epochs, parts.optimizer_steps, config.eval_steps)
    learning_rate = config.resolved_learning_rate(demo)
    guard = LossGuard(accelerator, precision_report.effective, learning_rate, config.output_dir)
    settings = resume.settings_of(asdict(config), facts(task.NAME, learning_rate, precision_report, parts, layout.files))
    checkpoints = Checkpoints(accelerator, layout, config.checkpoints, say, guard, parts, settings)
    watching = devices.uses_xla(accelerator.device) and config.watch_compilations
    watch = GraphWatch(config.padding, config.max_recompilations, say, analysis_file) if watching else None
    metrics = MetricsLog(accelerator, guard, config.watch, asdict(config), parts.replicas, parts.steps_per_epoch)
    profile = None
    if config.profile_steps and not devices.uses_xla(accelerator.device):
        say("profile_steps: no XLA device in this run, so no trace (torch_xla's profiler traces XLA devices)")
    elif config.profile_steps and processes.is_main(accelerator):
        profile = StepProfile(config.profile_steps, config.output_dir, accelerator.device)
    # In this order: the watch sees what a checkpoint compiled, a preempted run stops after its checkpoint, and the
    # metrics log, the profile and the best model start after a resumed run's step and best evaluation are known.
    best = best_model.BestModel(accelerator, layout, config, say)
    callbacks = Callbacks(checkpoints, watch, Preemption(accelerator, checkpoints), metrics, profile, best)
    calls = Calls(step, [config.logging_steps, config.save_steps if config.checkpoint else None, config.eval_steps],
                  say, lambda: chip_seconds_per_step(context, parts))
    Loop(context, parts, callbacks, guard, calls).fit(run)
    report = run_report(context, parts, run, watch, checkpoints)
    report.update(calls.report())
    if report["host_share_of_step"]["says"].startswith("host-bound"):
        say(report["host_share_of_step"]["says"])
    report.update(logging=metrics.report(), profile=profile.report() if profile else None, **best.report(run))
    if processes.is_main(accelerator):
        # The whole run's picture, resumed parts included: drawn from metrics.jsonl.
        report["curves"] = curves.draw(metrics.path, Path(config.output_dir) / curves.CURVES_FILE)
        say(f"curves: {report['curves']}")
    return report, parts.tokenizer, parts.data
