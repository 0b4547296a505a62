"""What an eval batching choice costs in compilations, each measured inside its own (forked) process.

Three measurements:
  eval_cell               the project's `evaluate` over `batching.eval_loader(..., last_batch=...)`
                          with one grid cell's eval size, last batch and padding, evaluated
                          several times (the first pass compiles, the rest show the steady cost);
  project_loop            the project's `training_function`, as users run it;
  accelerate_example_loop the loop pattern of Accelerate's examples/nlp_example.py, the
                          reference being compared against (the one loop written here).
"""

import statistics
import time

import torch

from {{ cookiecutter.project_slug }} import batching, precision, runtime, training
from {{ cookiecutter.project_slug }}.config import TrainConfig

from . import workload
from .grid import Cell
from .profiles import Profile

# Accelerate's examples/nlp_example.py: train 16, eval 32 (EVAL_BATCH_SIZE), 100 warm-up steps.
EXAMPLE_TRAIN_BATCH_SIZE = 16
EXAMPLE_EVAL_BATCH_SIZE = 32
EXAMPLE_WARMUP_STEPS = 100


def _accelerator():
    precision.set_xla_variables("fp32")
    from accelerate import Accelerator

    return Accelerator(mixed_precision="no")


def eval_cell(cell: Cell, profile: Profile, cache_dir: str | None = None) -> dict:
    """`evaluate` run `profile.eval_rounds` times; with cache_dir, over PyTorch/XLA's persistent cache."""
    if cache_dir:
        runtime.init_compilation_cache(cache_dir)  # before this process's first computation
    accelerator = _accelerator()
    device = accelerator.device
    config = workload.config_for(profile, eval_batch_size=cell.eval_batch_size, padding=cell.padding)
    tokenizer, _, eval_examples = workload.demo_examples(config)
    model = workload.build("demo", config, len(tokenizer))
    collator = batching.make_collator(tokenizer, cell.padding, config.max_seq_length)
    loader = batching.eval_loader(
        eval_examples, collator, cell.eval_batch_size, accelerator.num_processes, last_batch=cell.last_batch
    )
    model, loader = accelerator.prepare(model, loader)
    times, compilations, totals = [], [], {}
    for _ in range(profile.eval_rounds):
        runtime.sync(device, wait=True)
        with runtime.counting_compilations() as compiled:
            started = time.perf_counter()
            evaluation = training.evaluate(accelerator, model, loader)  # ends in a host read: the work is done
            times.append(time.perf_counter() - started)
        compilations.append(compiled["compilations"])
        totals = {key: totals.get(key, 0) + value for key, value in compiled.items()}
    return {
        "cell": cell.id, "eval_batch_size": cell.eval_batch_size, "size": cell.size_label,
        "train_batch_size": config.train_batch_size, "last_batch": cell.last_batch, "padding": cell.padding,
        "project_default": cell.is_default, "device": runtime.device_kind(device),
        "compilations": sum(compilations), "compile_seconds": totals["compile_seconds"],
        "compilations_after_first_eval": sum(compilations[1:]),
        "first_eval_s": times[0], "steady_eval_s": statistics.median(times[1:]), "eval_wall_s": sum(times),
        "eval_rounds": len(times), "examples_counted": evaluation["eval_examples_counted"],
        "eval_set_size": len(eval_examples),
        **({"cache_hits": totals["cache_hits"], "cache_misses": totals["cache_misses"],
            "cache_read_failures": totals["cache_read_failures"]} if cache_dir else {}),
    }


def compare_config(profile: Profile, output_dir: str) -> TrainConfig:
    """The project's baked batch sizes and padding; demo data; the profile's length and epochs."""
    return workload.config_for(
        profile, num_epochs=profile.compare_epochs, max_train_examples=profile.compare_train_examples,
        output_dir=output_dir, compilation_cache=True,
    )


def project_loop(profile: Profile, output_dir: str) -> dict:
    config = compare_config(profile, output_dir)
    started = time.perf_counter()
    report = training.training_function(config=config)
    wall = time.perf_counter() - started
    cache = report["compilation_cache"] or {}
    return {
        "loop": "project", "device": report["device"], "train_batch_size": config.train_batch_size,
        "eval_batch_size": config.eval_batch_size, "padding": config.padding, "epochs": config.num_epochs,
        "train_examples": report["train_examples"], "compilations": report["xla_compilations"],
        "compile_seconds": report["compile_seconds"], "wall_s": wall, "eval_accuracy": report["eval_accuracy"],
        "cache_hits": cache.get("hits"), "cache_misses": cache.get("misses"),
        "cache_read_failures": cache.get("read_failures"),
    }


def accelerate_example_loop(profile: Profile, output_dir: str) -> dict:
    """BASELINE, not the project's code: the loop of Accelerate's examples/nlp_example.py.

    Dynamic padding (tokenizer.pad(padding="longest")), train 16 / eval 32, ragged last
    batches, a linear schedule with 100 warm-up steps, and metrics moved to the host
    every eval batch. Same data, model, length and epochs as `project_loop`.
    """
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    config = compare_config(profile, output_dir)
    started = time.perf_counter()
    accelerator = _accelerator()
    with runtime.counting_compilations() as compiled:
        tokenizer, train_examples, eval_examples = workload.demo_examples(config)
        collate = batching.make_collator(tokenizer, "dynamic", config.max_seq_length)
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
        for _ in range(config.num_epochs):
            model.train()
            for batch in train_dataloader:
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            model.eval()
            correct = counted = 0
            for batch in eval_dataloader:
                with torch.no_grad():
                    logits = model(**batch).logits
                predictions, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
                correct += (predictions == references).sum().item()  # per batch, on the host
                counted += len(references)
    return {
        "loop": "accelerate-example", "device": runtime.device_kind(accelerator.device),
        "train_batch_size": EXAMPLE_TRAIN_BATCH_SIZE, "eval_batch_size": EXAMPLE_EVAL_BATCH_SIZE,
        "padding": "dynamic", "epochs": config.num_epochs, "train_examples": len(train_examples),
        "compilations": compiled["compilations"], "compile_seconds": compiled["compile_seconds"],
        "wall_s": time.perf_counter() - started, "eval_accuracy": correct / counted,
    }
