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

from . import batching, checkpointing, graph_watch, precision, runtime
from .config import ConfigError, TrainConfig
from .data import load_text_data, load_tokenizer, wants_demo
from .modeling import build_model, use_graph_friendly_attention
from .report import format_table, write_report


def training_function(model=None, config: TrainConfig | None = None) -> dict:
    """Train and evaluate; return the report. Builds the model only when none is passed in."""
    config = config or TrainConfig()
    runtime.check_stack()
    checkpointing.check_writable(config.output_dir, config.report_path)
    level = precision.requested_level(config)
    # All three must happen before the first tensor reaches an XLA device in this process.
    cache_dir = runtime.init_compilation_cache(f"{config.output_dir}/xla-cache") if config.compilation_cache else None
    analysis_file = None
    if runtime.xla_installed():
        precision.set_xla_variables(level)
        if config.watch_compilations:
            analysis_file = graph_watch.enable_analysis(Path(config.output_dir) / "xla-compilations", runtime.local_rank())

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
        report = _train(accelerator, model, config, precision_report, analysis_file)
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
    if accelerator.is_main_process:
        write_report(report, config.report_path)
        print(format_table(report))
    runtime.barrier(accelerator)
    accelerator.end_training()
    return report


def load_examples(config: TrainConfig, demo: bool):
    """(data, tokenizer, train examples, eval examples), tokenized without padding (the collator pads)."""
    data = load_text_data(config, demo)
    tokenizer = load_tokenizer(config, demo)
    encode = (tokenizer, data.text_column, data.text_pair_column, data.label_column, config.max_seq_length)
    train_examples = batching.tokenize(data.train, *encode)
    eval_examples = batching.tokenize(data.eval, *encode)
    if config.max_train_examples:
        train_examples = train_examples.select(range(min(config.max_train_examples, len(train_examples))))
    return data, tokenizer, train_examples, eval_examples


def _train(accelerator, model, config: TrainConfig, precision_report, analysis_file=None) -> dict:
    demo = runtime.main_process_decides(accelerator, lambda: wants_demo(config))
    with runtime.main_process_first(accelerator):
        data, tokenizer, train_examples, eval_examples = load_examples(config, demo)
    if model is None:
        model = build_model(config, demo, vocab_size=len(tokenizer))
    model = use_graph_friendly_attention(model)
    if precision.uses_model_cast(precision_report):
        model = model.to(torch.bfloat16)
        _say(accelerator, f"precision: {precision_report.verified}")

    collator = batching.make_collator(tokenizer, config.padding, config.max_seq_length)
    train_loader = batching.train_loader(train_examples, collator, config.train_batch_size, config.seed)
    eval_loader = batching.eval_loader(eval_examples, collator, config.eval_batch_size, accelerator.num_processes)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.resolved_learning_rate(demo), weight_decay=config.weight_decay
    )
    from transformers import get_linear_schedule_with_warmup

    steps_per_epoch = len(train_examples) // (config.train_batch_size * accelerator.num_processes)
    if steps_per_epoch == 0:
        raise ConfigError(
            f"train_batch_size={config.train_batch_size}: larger than the {len(train_examples)} training examples "
            f"shared by {accelerator.num_processes} process(es); lower it"
        )
    optimizer_steps = steps_per_epoch * config.num_epochs
    # Sized in global batches, as Accelerate's examples do: its prepared scheduler steps the one it
    # wraps num_processes times per optimizer step (split_batches=False), so a schedule sized in
    # per-process steps would reach 0 after 1/num_processes of the run.
    # No warm-up from zero: a learning rate of exactly 0 or 1 is a different XLA graph.
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, optimizer_steps * accelerator.num_processes)
    loaders = (train_loader, eval_loader)
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    if len(train_loader) != steps_per_epoch:
        raise RuntimeError(f"Accelerate's loader gives {len(train_loader)} steps per epoch, the schedule expects {steps_per_epoch}")
    precision_report.autocast = precision.forward_autocast(accelerator, model)
    for prepared, original in zip((train_loader, eval_loader), loaders, strict=True):
        if not hasattr(prepared, "dataset"):
            # Accelerate's XLA loader wrapper lacks `.dataset`, which its own save_state reads.
            prepared.dataset = original.dataset

    first_epoch = 0
    if config.resume:
        found = checkpointing.agreed_checkpoint(accelerator, config.output_dir)
        if found is None:
            _say(accelerator, f"resume: no complete checkpoint in {config.output_dir}; starting from scratch")
        else:
            accelerator.load_state(str(found))
            first_epoch = checkpointing.read_progress(found)["epochs_done"]
            _say(accelerator, f"resume: continuing after epoch {first_epoch} from {found}")

    metric_dtype = precision.metric_dtype(precision_report)
    device = accelerator.device
    trained, seconds, evaluation, saved, compiled_by_epoch = 0, 0.0, {}, None, []
    steady = {"examples": 0, "seconds": 0.0}  # epochs after this run's first, compile time taken out
    # This run's first and last optimizer steps (a resumed run starts where its checkpoint stopped).
    learning_rate = {"optimizer_steps": optimizer_steps, "first_step": scheduler.get_last_lr()[0], "last_step": None}
    watch = None
    if runtime.uses_xla(device) and config.watch_compilations:
        watch = graph_watch.GraphWatch(
            config.padding, config.max_recompilations, lambda message: _say(accelerator, message), analysis_file
        )
        watch.start()
    for epoch in range(first_epoch, config.num_epochs):
        # Through Accelerate's loader, not the sampler: on every pass it re-applies its own epoch
        # counter to the sampler, and that counter restarts at 0 in a resumed run.
        train_loader.set_epoch(epoch)
        started, compiling = time.perf_counter(), runtime.compile_counts().compile_seconds or 0.0
        train_loss, learning_rate["last_step"] = _train_epoch(
            accelerator, model, optimizer, scheduler, train_loader, metric_dtype, epoch, config, watch
        )
        elapsed = time.perf_counter() - started
        examples = steps_per_epoch * config.train_batch_size * accelerator.num_processes
        seconds, trained = seconds + elapsed, trained + examples
        if epoch > first_epoch:
            steady["examples"] += examples
            steady["seconds"] += elapsed - ((runtime.compile_counts().compile_seconds or 0.0) - compiling)
        evaluation = evaluate(accelerator, model, eval_loader, metric_dtype, watch, epoch)
        if watch:
            watch.check("other", epoch)  # the epoch's reductions and reads
            watch.warmed_up("eval")
        _say(
            accelerator,
            f"epoch {epoch + 1}/{config.num_epochs}: train loss {train_loss:.4f}, "
            f"eval loss {evaluation['eval_loss']:.4f}, eval accuracy {evaluation['eval_accuracy']:.4f}"
        )
        if config.checkpoint:
            saved = checkpointing.save_checkpoint(accelerator, config.output_dir, epoch, {"train_loss": train_loss})
        if watch:
            watch.check("other", epoch)
            watch.warmed_up("other")
        # Cumulative, so that a test can see that later epochs compile nothing new.
        compiled_by_epoch.append(runtime.compile_counts().compilations)
    return {
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
        "checkpoint": str(saved) if saved else None,
        "config": {key: value for key, value in asdict(config).items()},
    }


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
    accelerator, model, optimizer, scheduler, loader, metric_dtype, epoch, config, watch=None
) -> tuple[float, float]:
    """(mean train loss, learning rate of the last optimizer step)."""
    model.train()
    device = accelerator.device
    loss_sum = runtime.device_zeros(1, metric_dtype, device)
    # The bar is not given the loader: tqdm.auto's bar calls iter() on what it wraps, and each iter()
    # of Accelerate's XLA loader starts a prefetch thread that may finish the epoch and advance the
    # shuffle's epoch counter before the real pass starts (another data order in every run).
    # A context, so that a run stopped mid-epoch ends the bar's line before its error message.
    bar = tqdm(total=len(loader), desc=f"epoch {epoch + 1}/{config.num_epochs}", disable=not accelerator.is_main_process)
    steps = 0
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
    # One transfer per epoch: reading the loss every step would stall the device.
    total = runtime.sum_over_processes(accelerator, loss_sum).item()
    return total / max(steps * accelerator.num_processes, 1), learning_rate


def evaluate(accelerator, model, loader, metric_dtype=torch.float32, watch=None, epoch=0) -> dict:
    """Accuracy and mean loss over real examples only, accumulated on the device."""
    model.eval()
    device = accelerator.device
    counts = runtime.device_zeros(2, torch.int64, device)  # correct, counted
    loss_sum = runtime.device_zeros(1, metric_dtype, device)
    for step, batch in enumerate(loader, start=1):
        valid = batch.pop(batching.VALID)
        with torch.no_grad():
            logits = model(**batch).logits
        per_example = torch.nn.functional.cross_entropy(
            logits.to(metric_dtype), batch["labels"], reduction="none"
        )
        hits = (logits.argmax(dim=-1) == batch["labels"]).long() * valid
        counts += torch.stack([hits.sum(), valid.sum()])
        loss_sum += (per_example * valid.to(metric_dtype)).sum()
        runtime.sync(device)
        if watch:
            watch.check("eval", epoch, step, batch)
    counts = runtime.sum_over_processes(accelerator, counts).tolist()
    total_loss = runtime.sum_over_processes(accelerator, loss_sum).item()
    correct, counted = counts
    return {
        "eval_accuracy": correct / counted if counted else None,
        "eval_loss": total_loss / counted if counted else None,
        "eval_examples_counted": counted,
    }


def _say(accelerator, message: str) -> None:
    # Not accelerator.print: on an XLA CPU device its local process index is -1, so it prints nothing.
    # tqdm.write: a message in the middle of an epoch goes above the progress bar, not into it.
    if accelerator.is_main_process:
        tqdm.write(message)
