"""What batching choices and training loops cost in compilations, each measured inside its own (forked) process.

  eval_cell       the project's training steps, then its `evaluate` over one grid cell's eval loader
                  (eval size, last batch, padding), several times: the graphs the eval choice adds to a
                  run that trained first, and that later evaluations add nothing;
  project_loop    the project's `training_function`, as users run it (with and without the watch);
  accelerate_example_loop, trainer_loop
                  the loops users pick instead, the references compared against: the pattern of
                  Accelerate's examples/nlp_example.py, and transformers' Trainer as a user writes it
                  and with its TPU-friendly settings.

Every loop trains the same tiny BERT (same seed) on the same demo data, at the same length, for the
same epochs, in float32, and is watched by the project's graph watch (`graph_watch.GraphWatch`), which
counts each loop's recompilations and names their causes.
"""

import statistics
import time

import torch

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data import batching
from {{ cookiecutter.project_slug }}.loop import training
from {{ cookiecutter.project_slug }}.loop.evaluation import evaluate
from {{ cookiecutter.project_slug }}.loop.step import StepParts, train_step
from {{ cookiecutter.project_slug }}.precision import levels as precision
from {{ cookiecutter.project_slug }}.tasks.text_classification import make_collator
from {{ cookiecutter.project_slug }}.watch import compilations
from {{ cookiecutter.project_slug }}.xla import device as devices

from . import workload
from .baseline_watch import baseline_watch, recording, trainer_callback
from .grid import Cell
from .profiles import Profile
from .rounds import over_rounds

# Accelerate's examples/nlp_example.py: train 16, eval 32 (EVAL_BATCH_SIZE), 100 warm-up steps.
EXAMPLE_TRAIN_BATCH_SIZE = 16
EXAMPLE_EVAL_BATCH_SIZE = 32
EXAMPLE_WARMUP_STEPS = 100

# Every difference between the loops compared (all: same model, seed, data, length, epochs, learning rate, fp32).
LOOP_DIFFERENCES = {
    "project": "fixed padding to max_seq_length; training drops its ragged last batch; evaluation pads its last "
               "batch with masked rows; eval batch = train batch; metrics stay on the device until the end of "
               "an evaluation; linear decay without warm-up from 0; gradients clipped at a global norm of 1.0 (both "
               "as Trainer's defaults); AdamW's weight decay 0.01; a log every 10 optimizer steps (the default)",
    "project-no-watch": "the project's loop with --watch_compilations false: what the watch costs",
    "project-no-logs": "the project's loop with --logging_steps 0: no log read at all",
    "project-log-every-step": "the project's loop with --logging_steps 1: each step's loss sums and gradient norm read "
                              "on the metrics log's own thread",
    "accelerate-example": "Accelerate's examples/nlp_example.py: dynamic padding (to the longest row); train 16, "
                          "eval 32; ragged last batches in training and evaluation; 100 warm-up steps from a "
                          "learning rate of 0; no gradient clipping; accuracy moved to the host after every eval "
                          "batch (.item())",
    "trainer": "transformers' Trainer as a user writes it: its default collator pads dynamically; eval batch 8 "
               "(its default); ragged last batches; optim='adamw_torch' (its default fused AdamW fails on an XLA "
               "device); weight decay 0 (its default); logits gathered to the host for the accuracy (it clips at "
               "1.0 and decays linearly without warm-up, as the project's loop)",
    "trainer-tpu-tuned": "the same Trainer with padding to max_seq_length, dataloader_drop_last=True and eval "
                         "batch = train batch (no logs: logging_strategy='no')",
    "project-bf16": "the project's loop in its default precision (bf16 autocast around the forward)",
    "trainer-tpu-tuned-bf16": "the TPU-tuned Trainer with bf16=True (Accelerate's bf16 autocast)",
    "trainer-tpu-tuned-log-every-step": "the TPU-tuned Trainer with logging_steps=1: its loss read on the host "
                                        "(.item()) at every log",
}


def _accelerator():
    precision.set_xla_variables("fp32")
    from accelerate import Accelerator

    return Accelerator(mixed_precision="no")


def eval_cell(cell: Cell, profile: Profile, cache_dir: str | None = None) -> dict:
    """Train `profile.grid_train_steps` fixed-shape steps, then `evaluate` `profile.eval_rounds` times with the cell.

    With cache_dir, over PyTorch/XLA's persistent cache.
    """
    if cache_dir:
        compilations.init_compilation_cache(cache_dir)  # before this process's first computation
    accelerator = _accelerator()
    device = accelerator.device
    config = workload.config_for(profile, eval_batch_size=cell.eval_batch_size, padding=cell.padding)
    tokenizer, train_examples, eval_examples = workload.demo_examples(config)
    model = workload.build("demo", config, len(tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.resolved_learning_rate(True))
    fixed = make_collator(tokenizer, "fixed", config.max_seq_length)
    train_loader = batching.train_loader(train_examples, fixed, config.per_chip_train_batch(True, 1), config.seed)
    collator = make_collator(tokenizer, cell.padding, config.max_seq_length)
    loader = batching.eval_loader(
        eval_examples, collator, cell.eval_batch_size, accelerator.num_processes, last_batch=cell.last_batch
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 1000)
    model, optimizer, train_loader, loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, loader, scheduler
    )
    with compilations.counting_compilations() as trained:
        for _, batch in zip(range(profile.grid_train_steps), workload.forever(train_loader), strict=False):
            train_step(accelerator, StepParts(model, optimizer, scheduler), batch)
            devices.sync(device, wait=True)
    times, eval_graphs, totals = [], [], {}
    for _ in range(profile.eval_rounds):
        devices.sync(device, wait=True)
        with compilations.counting_compilations() as compiled:
            started = time.perf_counter()
            evaluation = evaluate(accelerator, model, loader)  # ends in a host read: the work is done
            times.append(time.perf_counter() - started)
        eval_graphs.append(compiled["compilations"])
        totals = {key: totals.get(key, 0) + value for key, value in compiled.items()}
    return {
        "cell": cell.id, "eval_batch_size": cell.eval_batch_size, "size": cell.size_label,
        "train_batch_size": config.per_chip_train_batch(True, 1), "last_batch": cell.last_batch, "padding": cell.padding,
        "project_default": cell.is_default, "device": devices.device_kind(device),
        "train_steps": profile.grid_train_steps, "train_compilations": trained["compilations"],
        "eval_compilations": eval_graphs[0], "compilations_after_first_eval": sum(eval_graphs[1:]),
        "eval_compile_seconds": totals["compile_seconds"],
        "first_eval_s": times[0], "steady_eval_s": statistics.median(times[1:]), "eval_wall_s": sum(times),
        "eval_rounds": len(times), "examples_counted": evaluation["eval_examples_counted"],
        "eval_set_size": len(eval_examples),
        **({"cache_hits": totals["cache_hits"], "cache_misses": totals["cache_misses"],
            "cache_read_failures": totals["cache_read_failures"]} if cache_dir else {}),
    }


def compare_config(profile: Profile, output_dir: str, **overrides) -> TrainConfig:
    """The project's baked batch sizes and padding; demo data; the profile's length, epochs and examples; the lazy step.

    The lazy step, as these comparisons with the Trainer's loop were set: on XLA:CPU the device's time dominates a
    steady step, and the JAX step's (the default) measured 1.015 of the tuned Trainer's in bf16 (one fresh clone, 3
    rounds, 2026-12-06); its gain is the host's time on a TPU (docs/chip-waiting.md)."""
    return workload.config_for(
        profile, num_epochs=profile.compare_epochs, max_train_examples=profile.compare_train_examples,
        output_dir=output_dir, **{"step_function": "lazy", **overrides},
    )


def _result(loop: str, compilations, compile_seconds, recompilations, causes, steady_step_s, wall, **figures) -> dict:
    return {
        "loop": loop, "differences": LOOP_DIFFERENCES[loop], "compilations": compilations,
        "compile_seconds": compile_seconds, "recompilations": recompilations,
        "recompilation_causes": None if causes is None else "; ".join(f"{key} x{n}" for key, n in causes.items()) or "none",
        "steady_step_s": steady_step_s, "wall_s": wall, **figures,
    }


def interleaved_comparison(project_runs: list[dict], trainer_runs: list[dict]) -> dict:
    """The project's loop against the tuned Trainer over rounds run one after the other: a ratio per round (its runs
    met about the same load on the machine), their median and range, and each loop's median figures; and the
    watch's own checks, timed inside each of the project's runs, as a share of the run's wall time."""
    steady, steady_range = over_rounds([run["steady_step_s"] for run in project_runs],
                                       [run["steady_step_s"] for run in trainer_runs])
    wall, wall_range = over_rounds([run["wall_s"] for run in project_runs], [run["wall_s"] for run in trainer_runs])
    return {
        # The watch's own checks timed inside each run (graph_watch.host_seconds): what it adds, free of the noise
        # that moves one run against another (a run with against one without it moved 0.76-1.37 a round).
        "watch_host_share": statistics.median(run["watch_seconds"] / run["wall_s"] for run in project_runs),
        "rounds": len(project_runs),
        "project_steady_step_s": statistics.median(run["steady_step_s"] for run in project_runs),
        "trainer_steady_step_s": statistics.median(run["steady_step_s"] for run in trainer_runs),
        "steady_step_vs_tuned_trainer": steady,
        "steady_ratio_range": steady_range,
        "wall_vs_tuned_trainer": wall,
        "wall_ratio_range": wall_range,
    }


def _watched(loop: str, watch, compiled: dict, wall: float, **figures) -> dict:
    return _result(
        loop, compiled["compilations"], compiled["compile_seconds"], watch.recompilations,
        watch.recompilation_causes(), watch.steady_step_seconds(), wall, **figures,
    )


def project_loop(profile: Profile, output_dir: str, watch: bool = True, loop: str | None = None, **overrides) -> dict:
    """The project's training_function; `loop` names a row that changes `overrides` (LOOP_DIFFERENCES)."""
    config = compare_config(profile, output_dir, watch_compilations=watch, **overrides)
    started = time.perf_counter()
    report = training.training_function(config=config)
    wall = time.perf_counter() - started
    causes = report["graphs"]["recompilation_causes"] if watch else None
    return _result(
        loop or ("project" if watch else "project-no-watch"), report["xla_compilations"], report["compile_seconds"],
        report["recompilations"], causes, report["steady_step_seconds"], wall,
        device=report["device"], epochs=config.num_epochs, train_examples=report["train_examples"],
        train_batch_size=config.per_chip_train_batch(True, 1),
        eval_accuracy=report["eval_accuracy"], device_to_host_transfers=report["device_to_host_transfers"],
        steady_examples_per_second=report["steady_examples_per_second"],
        checkpoints_written=report["checkpoints_written"], checkpoint_seconds=report["checkpoint_seconds"],
        logging_steps=config.logging_steps, logs=report["logging"]["logs"],
        watch_seconds=report["graphs"]["watch_seconds"] if watch else None,
    )


def accelerate_example_loop(profile: Profile, output_dir: str) -> dict:
    """BASELINE, not the project's code: the loop of Accelerate's examples/nlp_example.py.

    Dynamic padding (to the longest row), train 16 / eval 32, ragged last batches, a linear schedule
    with 100 warm-up steps, and metrics moved to the host every eval batch. The measurement adds only a
    sync after each step (Accelerate's loader would cut the same graph at the next batch) and the watch.
    """
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    config = compare_config(profile, output_dir)
    watch = baseline_watch(output_dir, "dynamic")
    started = time.perf_counter()
    accelerator = _accelerator()
    with compilations.counting_compilations() as compiled:
        tokenizer, train_examples, eval_examples = workload.demo_examples(config)
        collate = make_collator(tokenizer, "dynamic", config.max_seq_length)
        train_dataloader = DataLoader(train_examples, shuffle=True, collate_fn=collate, batch_size=EXAMPLE_TRAIN_BATCH_SIZE)
        eval_dataloader = DataLoader(eval_examples, shuffle=False, collate_fn=collate, batch_size=EXAMPLE_EVAL_BATCH_SIZE)
        model = workload.build("demo", config, len(tokenizer))
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.resolved_learning_rate(True))
        model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader
        )
        lr_scheduler = get_linear_schedule_with_warmup(
            optimizer, EXAMPLE_WARMUP_STEPS, len(train_dataloader) * config.num_epochs
        )
        watch.start()
        for epoch in range(config.num_epochs):
            model.train()
            for step, batch in enumerate(train_dataloader, start=1):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                devices.sync(accelerator.device)
                watch.check("train", epoch, step, batch)
            model.eval()
            correct = counted = 0
            for step, batch in enumerate(eval_dataloader, start=1):
                with torch.no_grad():
                    logits = model(**batch).logits
                predictions, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
                correct += (predictions == references).sum().item()  # per batch, on the host
                counted += len(references)
                watch.check("eval", epoch, step, batch)
            watch.check("other", epoch)
            watch.warmed_up("eval")
            watch.warmed_up("other")
    return _watched(
        "accelerate-example", watch, compiled, time.perf_counter() - started,
        device=devices.device_kind(accelerator.device), epochs=config.num_epochs, train_examples=len(train_examples),
        eval_accuracy=correct / counted,
    )


def trainer_loop(profile: Profile, output_dir: str, tuned: bool = False, logging_steps: int = 0,
                 bf16: bool = False) -> dict:
    """BASELINE, not the project's code: transformers' Trainer, as a user writes it or with its TPU settings; with
    `logging_steps`, logging the loss that often (its own way: a host read at each log); with `bf16`, its bf16=True
    (Accelerate's bf16 autocast, as the project's default precision)."""
    config = compare_config(profile, output_dir)
    padding = "fixed" if tuned else "dynamic"
    watch = baseline_watch(output_dir, padding)
    # The wall counts the Trainer's import (about 0.4 s on this machine), as the other loops' walls count what they
    # import inside (the project's training_function imports transformers' schedules, TensorBoard, matplotlib).
    started = time.perf_counter()
    import numpy
    from transformers import Trainer, TrainingArguments

    precision.set_xla_variables("fp32")
    with compilations.counting_compilations() as compiled:
        tokenizer, train_examples, eval_examples = workload.demo_examples(config)
        model = workload.build("demo", config, len(tokenizer))
        collator = make_collator(tokenizer, padding, config.max_seq_length)
        shapes = {}  # the last batch collated, the last eval metrics

        def accuracy(prediction):
            return {"accuracy": float((numpy.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())}

        arguments = TrainingArguments(
            output_dir=output_dir, num_train_epochs=config.num_epochs, learning_rate=config.resolved_learning_rate(True),
            per_device_train_batch_size=config.per_chip_train_batch(True, 1),
            per_device_eval_batch_size=config.per_chip_eval_batch(config.per_chip_train_batch(True, 1)) if tuned else 8,
            eval_strategy="epoch", save_strategy="no", logging_strategy="steps" if logging_steps else "no",
            logging_steps=logging_steps or 500, report_to=[], disable_tqdm=True,
            optim="adamw_torch", seed=config.seed, dataloader_drop_last=tuned, bf16=bf16,
        )
        trainer = Trainer(
            model=model, args=arguments, train_dataset=train_examples, eval_dataset=eval_examples,
            data_collator=recording(collator, shapes), compute_metrics=accuracy,
            callbacks=[trainer_callback(watch, shapes)],
        )
        trainer.train()  # evaluates after every epoch
    name = "trainer-tpu-tuned" if tuned else "trainer"
    name = f"{name}-log-every-step" if logging_steps == 1 else f"{name}-bf16" if bf16 else name
    return _watched(
        name, watch, compiled, time.perf_counter() - started,
        device=devices.device_kind(trainer.args.device), epochs=config.num_epochs, train_examples=len(train_examples),
        eval_accuracy=shapes["metrics"].get("eval_accuracy"), logging_steps=logging_steps,
    )
