"""The training function shared by train.py and the notebook.

`training_function(model, config)` creates everything device-related itself, so
that a notebook can build the model in its parent process, touch no device, and
hand the model to `notebook_launcher` (the shared-model pattern).
"""

import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import batching, checkpointing, graph_watch, precision, preemption, runtime
from .config import ConfigError, TrainConfig
from .data import wants_demo
from .modeling import build_model, use_graph_friendly_attention
from .parallel import layout_for
from .report import format_table, write_report
from .tasks import task


def training_function(model=None, config: TrainConfig | None = None) -> dict:
    """Train and evaluate; return the report. Builds the model only when none is passed in."""
    config = config or TrainConfig()
    runtime.check_stack()
    checkpointing.check_writable(config.output_dir, config.report_path)
    level = precision.requested_level(config)
    layout = layout_for(config)
    # All four must happen before the first tensor reaches an XLA device in this process.
    cache_dir = runtime.init_compilation_cache(f"{config.output_dir}/xla-cache") if config.compilation_cache else None
    analysis_file = None
    if runtime.xla_installed():
        precision.set_xla_variables(level)
        if config.watch_compilations:
            analysis_file = graph_watch.enable_analysis(Path(config.output_dir) / "xla-compilations", runtime.local_rank())
    layout.start()

    from accelerate import Accelerator
    from accelerate.utils import set_seed

    accelerator = Accelerator(
        mixed_precision=precision.accelerate_mixed_precision(level),
        cpu=not runtime.xla_installed() and not torch.cuda.is_available(),
        dataloader_config=batching.shuffle_config(config.seed),
    )
    set_seed(config.seed)
    runtime.quiet_unless_main(accelerator)
    autocast = precision.decide_autocast(accelerator)
    with runtime.counting_compilations() as compiled:
        precision_report = precision.realise(level, accelerator.device, autocast)
        report, tokenizer = _train(accelerator, layout, model, config, precision_report, analysis_file)
    report.update(
        xla_compilations=compiled["compilations"],
        compile_seconds=compiled["compile_seconds"],
        device_to_host_transfers=compiled["device_to_host_transfers"],
        compilation_cache=None if cache_dir is None else {
            "folder": str(cache_dir),
            "hits": compiled["cache_hits"],
            "misses": compiled["cache_misses"],
            "read_failures": compiled["cache_read_failures"],
        },
    )
    if config.export:
        # After the counting: gathering the weights to the host is not part of training's transfers.
        report["exported"] = export(accelerator, layout, tokenizer, config.export_dir)
    if accelerator.is_main_process:
        write_report(report, config.report_path)
        print(format_table(report))
    runtime.barrier(accelerator)
    # The trained model, optimizer and loaders are released while the process group still exists: DDP's reducer
    # holds the group, and torch's gloo group, destroyed after Accelerate's end_training destroyed the group, can
    # wait forever for its worker thread (seen once: a finished 2-process run hung in ~ProcessGroupGloo).
    layout.release()
    accelerator.free_memory()
    accelerator.end_training()
    return report


def load_examples(config: TrainConfig, demo: bool):
    """(data source, tokenizer, train examples, eval examples): the task's (tasks/), unpadded (the collator pads)."""
    return task.load_examples(config, demo)


def export(accelerator, layout, tokenizer, folder: Path) -> str:
    """The trained model as `save_pretrained` writes it (plain names, CPU tensors): `from_pretrained` loads it anywhere."""
    weights = layout.host_state_dict(accelerator)  # every process takes part (a sharded model is gathered)
    if accelerator.is_main_process:
        layout.plain_model(accelerator).save_pretrained(folder, state_dict=weights)
        tokenizer.save_pretrained(folder)
    runtime.barrier(accelerator)
    return str(folder)


def _train(accelerator, layout, model, config: TrainConfig, precision_report, analysis_file=None):
    """(report, tokenizer): the loop, whatever the layout (parallel/) it is given."""
    demo = runtime.main_process_decides(accelerator, lambda: wants_demo(config))
    with runtime.main_process_first(accelerator):
        data, tokenizer, train_examples, eval_examples = load_examples(config, demo)
    if model is None:
        model = build_model(config, demo, vocab_size=len(tokenizer))
    model = use_graph_friendly_attention(model)
    if precision.uses_model_cast(precision_report):
        model = model.to(torch.bfloat16)
        _say(accelerator, f"precision: {precision_report.verified}")
    model = layout.wrap(model)

    collator = task.make_collator(tokenizer, config.padding, config.max_seq_length)
    # A loader batch feeds one chip (data) or all of a host's chips (fsdp).
    per_loader = layout.devices_per_process()
    train_loader = batching.train_loader(train_examples, collator, config.train_batch_size * per_loader, config.seed)
    eval_loader = batching.eval_loader(
        eval_examples, collator, config.eval_batch_size * per_loader, layout.loader_shards(accelerator)
    )
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.resolved_learning_rate(demo), weight_decay=config.weight_decay
    )
    from transformers import get_linear_schedule_with_warmup

    replicas = layout.replicas(accelerator)  # chips (fsdp) or processes (data) sharing one optimizer step
    steps_per_epoch = len(train_examples) // (config.train_batch_size * replicas)
    if steps_per_epoch == 0:
        raise ConfigError(
            f"train_batch_size={config.train_batch_size}: larger than the {len(train_examples)} training examples "
            f"shared by {replicas} {'chips' if layout.name == 'fsdp' else 'process(es)'}; lower it"
        )
    optimizer_steps = steps_per_epoch * config.num_epochs
    # Sized in the scheduler's own calls: Accelerate's prepared scheduler (data) steps the one it wraps
    # num_processes times per optimizer step, so a schedule sized in optimizer steps would reach 0 early.
    # No warm-up from zero: a learning rate of exactly 0 or 1 is a different XLA graph.
    scheduler = get_linear_schedule_with_warmup(
        optimizer, 0, optimizer_steps * layout.scheduler_calls_per_step(accelerator)
    )
    model, optimizer, train_loader, eval_loader, scheduler = layout.prepare(
        accelerator, model, optimizer, train_loader, eval_loader, scheduler
    )
    if len(train_loader) != steps_per_epoch:
        raise RuntimeError(f"Accelerate's loader gives {len(train_loader)} steps per epoch, the schedule expects {steps_per_epoch}")
    precision_report.autocast = precision.forward_autocast(accelerator, model)

    # Where the run stands: whole epochs done, batches of the next epoch trained, optimizer steps, its loss so far.
    position = {"epochs_done": 0, "epoch_step": 0, "global_step": 0, "loss_sum": 0.0}
    if config.resume:
        found = checkpointing.agreed_checkpoint(accelerator, config.output_dir)
        if found is None:
            _say(accelerator, f"resume: no complete checkpoint in {config.output_dir}; starting from scratch")
        else:
            layout.load_state(accelerator, found)
            progress = checkpointing.read_progress(found)
            position.update({key: progress[key] for key in position if key in progress})
            if "global_step" not in progress:  # written by an earlier version of this project
                position["global_step"] = position["epochs_done"] * steps_per_epoch
            within = f", step {position['epoch_step']} of epoch {position['epochs_done'] + 1}" if position["epoch_step"] else ""
            _say(accelerator, f"resume: continuing after epoch {position['epochs_done']}{within} from {found}")
    first_epoch = position["epochs_done"]

    metric_dtype = precision.metric_dtype(precision_report)
    device = accelerator.device
    trained, seconds, evaluation, compiled_by_epoch = 0, 0.0, {}, []
    steady = {"examples": 0, "seconds": 0.0}  # epochs after this run's first, compile time taken out
    # This run's first and last optimizer steps (a resumed run starts where its checkpoint stopped).
    learning_rate = {"optimizer_steps": optimizer_steps, "first_step": scheduler.get_last_lr()[0], "last_step": None}
    watch = None
    if runtime.uses_xla(device) and config.watch_compilations:
        watch = graph_watch.GraphWatch(
            config.padding, config.max_recompilations, lambda message: _say(accelerator, message), analysis_file
        )
        watch.start()
    saving = {"written": 0, "seconds": 0.0, "last": None}
    policy = preemption.SavePolicy(config.save_steps, config.save_minutes)

    def save(epochs_done: int, epoch_step: int, loss_sum: float) -> None:
        started = time.perf_counter()
        progress = {**position, "epochs_done": epochs_done, "epoch_step": epoch_step, "loss_sum": loss_sum}
        saving["last"] = checkpointing.save_checkpoint(
            accelerator, config.output_dir, progress, config.keep_checkpoints, layout.save_state
        )
        saving["written"] += 1
        saving["seconds"] += time.perf_counter() - started
        policy.saved()

    def stop_if_asked(signals, epoch: int, step: int) -> None:
        (stop,) = preemption.agree(accelerator, signals.received is not None)
        if stop:
            kept = (f"checkpoint {saving['last']} written; run again with --resume to continue from the next batch"
                    if config.checkpoint else "no checkpoint (--checkpoint false): a new run starts from scratch")
            raise preemption.Preempted(f"preempted ({signals.name or 'by another process'}) at epoch {epoch + 1} "
                                       f"step {step}: {kept}")

    def after_step(signals, epoch: int, step: int, loss_sum) -> None:
        """At every step boundary: a step checkpoint when due, and a clean stop when a signal came."""
        position["global_step"] += 1
        stop, due = preemption.agree(
            accelerator, signals.received is not None, config.checkpoint and policy.due(position["global_step"])
        )
        if config.checkpoint and (due or stop):
            # The whole run's loss so far (one read, only when saving): a resumed epoch reports the same mean.
            save(epoch, step, runtime.sum_over_processes(accelerator, loss_sum).item())
        if stop:
            stop_if_asked(signals, epoch, step)

    with preemption.StopSignals() as signals:
        for epoch in range(first_epoch, config.num_epochs):
            resumed = position["epoch_step"] if epoch == first_epoch else 0
            loader = layout.train_batches(accelerator, train_loader, epoch, resumed)
            started, compiling = time.perf_counter(), runtime.compile_counts().compile_seconds or 0.0
            train_loss, learning_rate["last_step"] = _train_epoch(
                accelerator, model, optimizer, scheduler, loader, metric_dtype, epoch, config, watch,
                resumed=(resumed, position["loss_sum"] if resumed else 0.0),
                after_step=lambda epoch, step, loss_sum: after_step(signals, epoch, step, loss_sum),
            )
            elapsed = time.perf_counter() - started
            examples = (steps_per_epoch - resumed) * config.train_batch_size * replicas
            seconds, trained = seconds + elapsed, trained + examples
            if epoch > first_epoch:
                steady["examples"] += examples
                steady["seconds"] += elapsed - ((runtime.compile_counts().compile_seconds or 0.0) - compiling)
            evaluation = evaluate(accelerator, model, layout.eval_batches(eval_loader), metric_dtype, watch, epoch)
            if watch:
                watch.check("other", epoch)  # the epoch's reductions and reads
                watch.warmed_up("eval")
            _say(accelerator, f"epoch {epoch + 1}/{config.num_epochs}: train loss {train_loss:.4f}, {task.summary(evaluation)}")
            if config.checkpoint:
                save(epoch + 1, 0, 0.0)
            if watch:
                watch.check("other", epoch)
                watch.warmed_up("other")
            # Cumulative, so that a test can see that later epochs compile nothing new.
            compiled_by_epoch.append(runtime.compile_counts().compilations)
            stop_if_asked(signals, epoch, steps_per_epoch)  # a signal during the evaluation or the save
    report = {
        "device": runtime.device_kind(device),
        "distributed_type": str(accelerator.distributed_type.value),
        "num_processes": accelerator.num_processes,
        "epochs": config.num_epochs,
        "epochs_run": config.num_epochs - first_epoch,
        "process_compilations_after_each_epoch": compiled_by_epoch,
        "recompilations": watch.recompilations if watch else None,
        "graphs": watch.report() if watch else None,
        "train_examples": len(train_examples),
        # Everything, compilation included: on a short run mostly compilation. The steady figure is the speed.
        "examples_per_second_with_compilation": trained / seconds if seconds else None,
        "steady_examples_per_second": steady["examples"] / steady["seconds"] if steady["seconds"] > 0 else None,
        "steady_step_seconds": watch.steady_step_seconds() if watch else None,
        # Host-side floats: the scheduler lives on the host, reading it costs no device transfer.
        "learning_rate": {**learning_rate, "after_training": scheduler.get_last_lr()[0]},
        **evaluation,
        "precision": precision_report.as_dict(),
        "data": data.source,
        "checkpoint": str(saving["last"]) if saving["last"] else None,
        "checkpoints_written": saving["written"],
        "checkpoint_seconds": saving["seconds"],
        "task": task.NAME,
        "layout": layout.describe(accelerator, optimizer, precision.bytes_on_device(precision_report)),
        "config": {key: value for key, value in asdict(config).items()},
    }
    report.update(task.facts(train_examples, collator, config, report))
    return report, tokenizer


def train_step(accelerator, model, optimizer, scheduler, batch):
    """One optimizer step; returns the loss, detached and still lazy (the caller decides when to sync).

    Separate from the epoch loop so that the benchmarks time exactly this step.
    """
    batch.pop(batching.VALID, None)
    loss = model(**batch).loss
    accelerator.backward(loss)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return loss.detach()


def _train_epoch(
    accelerator, model, optimizer, scheduler, loader, metric_dtype, epoch, config, watch=None, resumed=(0, 0.0),
    after_step=None,
) -> tuple[float, float]:
    """(mean train loss, learning rate of the last optimizer step).

    `resumed` is (batches of this epoch already trained, the loss they summed) when a run resumes mid-epoch;
    `after_step(epoch, step, loss_sum)` runs at every step boundary (checkpoints, preemption).
    """
    model.train()
    device = accelerator.device
    steps, loss_before = resumed
    # The loss so far as data, not a graph constant; on the main process only, so the sum over processes is it.
    loss_sum = runtime.device_values([loss_before if accelerator.is_main_process else 0.0], metric_dtype, device)
    # The bar is not given the loader: tqdm.auto's bar calls iter() on what it wraps, and each iter()
    # of Accelerate's XLA loader starts a prefetch thread that may finish the epoch and advance the
    # shuffle's epoch counter before the real pass starts (another data order in every run).
    # A context, so that a run stopped mid-epoch ends the bar's line before its error message.
    bar = tqdm(total=steps + len(loader), initial=steps, desc=f"epoch {epoch + 1}/{config.num_epochs}",
               disable=not accelerator.is_main_process)
    learning_rate = None
    with bar:
        for batch in loader:
            learning_rate = scheduler.get_last_lr()[0]
            loss_sum += train_step(accelerator, model, optimizer, scheduler, batch).to(metric_dtype)
            steps += 1
            runtime.sync(device)
            if watch:
                watch.check("train", epoch, steps, batch)
            bar.update()
            if after_step:
                after_step(epoch, steps, loss_sum)
    # One transfer per epoch: reading the loss every step would stall the device.
    total = runtime.sum_over_processes(accelerator, loss_sum).item()
    return total / max(steps * accelerator.num_processes, 1), learning_rate


def evaluate(accelerator, model, loader, metric_dtype=torch.float32, watch=None, epoch=0) -> dict:
    """The task's metrics over real examples only (masked copies count for nothing), summed on the device."""
    model.eval()
    device = accelerator.device
    counts = runtime.device_zeros(len(task.COUNTS), torch.int64, device)
    loss_sum = runtime.device_zeros(1, metric_dtype, device)
    for step, batch in enumerate(loader, start=1):
        valid = batch.pop(batching.VALID)
        with torch.no_grad():
            batch_counts, batch_loss = task.eval_batch(model, batch, valid, metric_dtype)
        counts += batch_counts
        loss_sum += batch_loss
        runtime.sync(device)
        if watch:
            watch.check("eval", epoch, step, batch)
    counts = runtime.sum_over_processes(accelerator, counts).tolist()
    total_loss = runtime.sum_over_processes(accelerator, loss_sum).item()
    return task.metrics(dict(zip(task.COUNTS, counts, strict=True)), total_loss)


def _say(accelerator, message: str) -> None:
    # Not accelerator.print: on an XLA CPU device its local process index is -1, so it prints nothing.
    # tqdm.write: a message in the middle of an epoch goes above the progress bar, not into it.
    if accelerator.is_main_process:
        tqdm.write(message)
