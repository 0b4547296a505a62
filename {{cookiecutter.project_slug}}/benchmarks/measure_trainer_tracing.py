"""The host's tracing per step of the task's tuned baseline trainer, as a row beside measure_host_tracing.py's.
{% if cookiecutter.task == "causal-lm" %}
The baseline is TRL's SFTTrainer as measure_lm_loops.py's "sft-runs-on-xla" sets it up (SFTConfig's defaults, plus the
two settings without which it does not train on XLA: no gradient checkpointing, optim="adamw_torch").
{%- else %}
The baseline is transformers' Trainer as measure_recompilation.py's "tuned" Trainer sets it up (optim="adamw_torch",
the bake's learning rate and seed, float32, logging off).
{%- endif %}

One step is the trainer's own per-step code from transformers' Trainer._run_epoch (5.25), called method by method:
the count of items in the batch (get_batch_samples), training_step (model.train(), compute_loss, accelerator.backward),
the loss added to _tr_loss, the FLOPs count, then accelerator's clip at max_grad_norm 1.0 (gradients "all-reduced"
first, a no-op on one device), the wrapped optimizer's step (torch's AdamW: on XLA its per-tensor loop, not foreach),
the scheduler's step, model.zero_grad() and the callbacks. Phases: forward = up to the end of compute_loss, backward =
the rest of training_step, optimizer = everything after it. The optimizer and model go through accelerator.prepare as
_prepare_for_training does; the model, batch, seed and float32 are measure_host_tracing.one_row's.

What the trainer's real loop does and this row leaves out: its data loading and collation (the batch is already a dict
of device tensors), the sync at each step's end (MpDeviceLoader's mark_step, here one_row's discard_traced, nothing
compiled), and any logging, evaluation or saving step.
{%- if cookiecutter.task == "causal-lm" %}
And, inside SFTTrainer.compute_loss, its metrics: accelerate's gather on XLA marks a step (_tpu_gather), and it is
called four times a step, each result then read on the host (.item(), `num_valid > 0`). A real step is therefore cut
into several graphs, the host waiting on the device in the middle of each one; here those gathers are stood in by host
values, so the sums they read are traced and counted, the syncs and waits are not. The row is tracing only: on a chip,
SFTTrainer's step is slower than this row says.
{%- endif %}
"""

import tempfile
import time

import torch

from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly
from {{ cookiecutter.project_slug }}.watch import compilations
from {{ cookiecutter.project_slug }}.watch.host_tracing import HostTracing
from {{ cookiecutter.project_slug }}.xla import device as devices

from .measure_host_tracing import BAKED, BATCH, LENGTH, NARROW, _batch, _model, figures, torch_adamw_state_now
{%- if cookiecutter.task == "causal-lm" %}
from .measure_lm_loops import RUNS_ON_XLA


def _trainer(model, output_dir: str):
    """SFTTrainer as measure_lm_loops.sft_loop builds it ("sft-runs-on-xla"), on the narrow model."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    from {{ cookiecutter.project_slug }}.config import DEMO_LEARNING_RATE
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(BAKED.data, BAKED.model, demo=True)  # the demo's, offline (tasks/causal_lm.load_examples' settings)
    tokenizer.eos_token = tokenizer.eos_token or tokenizer.sep_token
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    arguments = SFTConfig(output_dir=output_dir, learning_rate=DEMO_LEARNING_RATE, per_device_train_batch_size=BATCH,
                          max_length=LENGTH, bf16=False, seed=BAKED.seed, disable_tqdm=True, **RUNS_ON_XLA)
    rows = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 2})  # SFTTrainer wants one; never iterated here
    trainer = SFTTrainer(model=model, args=arguments, train_dataset=rows, processing_class=tokenizer)
    # Its metrics' gathers mark a step and their results are read on the host: stood in by a host value (docstring).
    trainer.accelerator.gather_for_metrics = lambda tensor, use_gather_object=False: torch.ones((), dtype=tensor.dtype)
    return trainer
{%- else %}


def _trainer(model, output_dir: str):
    """transformers' Trainer with measure_recompilation.trainer_loop's tuned TrainingArguments (those that act on a
    training step; no datasets: the batch is fed directly)."""
    from transformers import Trainer, TrainingArguments

    arguments = TrainingArguments(
        output_dir=output_dir, learning_rate=BAKED.resolved_learning_rate(True), per_device_train_batch_size=BATCH,
        save_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True, optim="adamw_torch",
        seed=BAKED.seed, dataloader_drop_last=True, bf16=False,
    )
    return Trainer(model=model, args=arguments)
{%- endif %}


def _timed_compute_loss(trainer, tracing: HostTracing) -> None:
    """The forward phase ends where the trainer's compute_loss returns (inside its training_step)."""
    compute_loss = trainer.compute_loss

    def timed(*args, **kwargs):
        loss = compute_loss(*args, **kwargs)
        tracing.lap("forward")
        return loss

    trainer.compute_loss = timed


def _step(trainer, model, batch: dict, tracing: HostTracing) -> None:
    """One optimizer step as Trainer._run_epoch runs it without accumulation (transformers 5.25), its syncs left out."""
    args, state, control = trainer.args, trainer.state, trainer.control
    tracing.begin()
    num_items = trainer._get_num_items_in_batch([batch], args.device)  # get_batch_samples, the batch already fetched
    trainer.current_gradient_accumulation_steps = 1
    trainer.accelerator.gradient_state._set_sync_gradients(True)
    trainer.control = trainer.callback_handler.on_step_begin(args, state, control)
    loss = trainer.training_step(model, batch, num_items)
    tracing.lap("backward")
    trainer._tr_loss += loss
    trainer.current_flos += float(trainer.floating_point_ops(batch))
    trainer._track_num_input_tokens(batch)
    grad_norm = trainer._get_grad_norm(model, grad_norm=trainer._clip_grad_norm(model))  # noqa: F841 (as its loop)
    trainer.control = trainer.callback_handler.on_pre_optimizer_step(args, state, trainer.control)
    trainer.optimizer.step()
    trainer.control = trainer.callback_handler.on_optimizer_step(args, state, trainer.control)
    trainer._get_learning_rate()
    if not trainer.accelerator.optimizer_step_was_skipped:
        trainer.lr_scheduler.step()
    model.zero_grad()
    state.global_step += 1
    trainer.control = trainer.callback_handler.on_step_end(args, state, trainer.control)
    tracing.lap("optimizer")  # _maybe_log_save_evaluate left out: no logging, evaluation or saving step here


def trainer_row(steps: int) -> dict:
    """Trace `steps` steps of the baseline trainer (the first ones warm up); its medians in ms, one_row's keys."""
    device = devices.current_device()
    torch.manual_seed(BAKED.seed)
    model = make_graph_friendly(_model({**NARROW, "max_position_embeddings": max(512, LENGTH)}))
    model.to(device).train()
    batch = {name: tensor.to(device) for name, tensor in _batch(BATCH, LENGTH).items()}
    tracing = HostTracing()
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = _trainer(model, output_dir)
        # _prepare_for_training's order: the optimizer, accelerator.prepare, then the scheduler on the wrapped one.
        trainer.create_optimizer()
        torch_adamw_state_now(trainer.optimizer, model)
        model, trainer.optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
        trainer.create_scheduler(num_training_steps=steps)
        for attr in ("model", "optimizer", "lr_scheduler"):
            setattr(trainer.callback_handler, attr, getattr(trainer, attr))
        trainer._tr_loss = torch.tensor(0.0, device=device)  # the loop's on-device loss sum, as it makes it
        model.zero_grad()
        _timed_compute_loss(trainer, tracing)
        devices.discard_traced(device)  # nothing set up above is part of a step's graph
        with compilations.counting_compilations() as compiled:
            started = time.perf_counter()
            for _ in range(steps):
                _step(trainer, model, dict(batch), tracing)
                tracing.handed_over()
                devices.discard_traced(device)  # in place of the loader's mark_step: dropped, never compiled
            wall = time.perf_counter() - started
    return figures(tracing, compiled["compilations"], wall, model)
