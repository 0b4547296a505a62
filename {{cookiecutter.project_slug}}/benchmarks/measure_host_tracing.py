"""The host's tracing time per step at the default model's real layer count, against the chip's compute time.

Lazy tensors re-trace the whole step in Python at every step; a TPU runs one step while the host traces the next, so a
step can never be shorter than its tracing. How long tracing takes follows the number of operations and tensors, not
their sizes: the default model is built with its real layers and tensors but 64 wide (and a small vocabulary), so that
XLA:CPU executes it cheaply, while the chip's side is computed from the full model's FLOPs (watch/flops.py's formula,
the model built on the meta device: no memory) at the baked batch and sequence length, at 50 % of a chip's peak.

Rows, each in the same forked child, one after the other, on the same model, batch and seed, float32:
  plain         a bare lazy loop: forward, backward, clip at 1.0, torch's AdamW(foreach=True), nothing else;
  project-lazy  the project's step (loop/step.py's train_step: its AdamW, clipping, schedule), traced op by op;
  project-jax   the same step with --step_function jax: one JAX function traced once (xla/jax_step.py);
  project-jax-k4, project-jax-k16
                the JAX step with --steps_per_execution 4 and 16: 4 or 16 steps in one call (xla/several_steps.py),
                timed per call and divided by its steps;
  project-default
                the run's defaults: the JAX step with the K that auto (loop/calls.py) would choose on each chip, from
                the host's time per call measured in the project-jax row and that chip's time (logs every 10 steps
                allow 1, 2, 5 or 10); each chip's figure is the row measured at its K;
  eval-lazy, eval-jax
                an evaluation batch (the task's eval_batch: forward, losses in fixed point, counts), traced op by op,
                and as one JAX function (xla/jax_eval.py, the default with the JAX step); the chip's side is the
                forward's third of the step's FLOPs;
  {{ "sft-trainer   TRL's SFTTrainer" if cookiecutter.task == "causal-lm" else "tuned-trainer transformers' Trainer, TPU-tuned," }} its own step method by method (measure_trainer_tracing.py).
Each step is timed from its first operation to the graph's hand-over, the sync and execution left out. Every row
starts from weights and optimizer state that are device data, and each traced step is then dropped without compiling
or running it (xla/device.py's discard_traced): the next step is traced over placeholders of the same shapes, the same
graph again, and no full-depth step is compiled (XLA:CPU took 17-40 s a row for the 12-layer model). Checked once
against steps synced and run instead, on the 12-layer BERT: plain 168 ms synced, 151-169 dropped; the project's lazy
step 109 and 112-118.
"""

import time

import torch
{%- if cookiecutter.task == "causal-lm" %}
from transformers import Qwen2Config, Qwen2ForCausalLM
{%- else %}
from transformers import BertConfig, BertForSequenceClassification
{%- endif %}

from {{ cookiecutter.project_slug }}.config import ATTENTION, TrainConfig
from {{ cookiecutter.project_slug }}.loop.adamw import AdamW
from {{ cookiecutter.project_slug }}.loop.calls import choose
from {{ cookiecutter.project_slug }}.loop.step import StepParts, train_step
from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly
from {{ cookiecutter.project_slug }}.watch import compilations, flops
from {{ cookiecutter.project_slug }}.watch.host_tracing import FIRST_STEPS_LEFT_OUT, HostTracing
from {{ cookiecutter.project_slug }}.xla import device as devices

from .profiles import Profile

TRAINER = {{ '"sft-trainer"' if cookiecutter.task == "causal-lm" else '"tuned-trainer"' }}  # measure_trainer_tracing.py
ROWS = ("plain", "project-lazy", "project-jax", "project-jax-k4", "project-jax-k16", "project-default", TRAINER,
        "eval-lazy", "eval-jax")
EVAL_SHARE = 1 / 3  # a forward's FLOPs of a training step's (2N of 6N per token)
SEVERAL = {"project-jax-k4": 4, "project-jax-k16": 16}
NARROW = {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "vocab_size": 1024}
MFU = 0.5
CHIPS = ("v5e", "v6e", "tpu7x")  # tpu7x: per device, half a chip (planning/targets.py)
BAKED = TrainConfig()
BATCH, LENGTH = BAKED.per_chip_train_batch(False, 1), BAKED.max_seq_length  # the bake's 16 x 128 per chip
STEPS = {"quick": 8, "full": 32}  # HostTracing leaves the first 2 out: the medians are over 6 and 30 steps
{%- if cookiecutter.task == "causal-lm" %}
MODEL = "Qwen2.5-0.5B"
# Qwen2.5-0.5B's config.json: 24 layers, 14 query and 2 key-value heads, tied embeddings.
FULL = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True, "max_position_embeddings": 32768}


def _model(shape: dict):
    return Qwen2ForCausalLM(Qwen2Config(**{**FULL, **shape, "num_key_value_heads": 2}, attn_implementation=ATTENTION))


def _batch(batch_size: int, length: int) -> dict:
    ids = torch.randint(0, NARROW["vocab_size"], (batch_size, length))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
{%- else %}
MODEL = "bert-base-cased"
# bert-base-cased's config.json: 12 layers, 12 heads.
FULL = {"vocab_size": 28996, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
        "num_attention_heads": 12}


def _model(shape: dict):
    return BertForSequenceClassification(BertConfig(**{**FULL, **shape}, num_labels=2, attn_implementation=ATTENTION))


def _batch(batch_size: int, length: int) -> dict:
    ids = torch.randint(0, NARROW["vocab_size"], (batch_size, length))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (batch_size,))}
{%- endif %}


def chip_seconds(batch_size: int, length: int) -> dict:
    """The full model's step on one chip at MFU: its FLOPs per token times the step's tokens over MFU x peak."""
    with torch.device("meta"):
        full = _model({})
    step_flops = flops.model_flops_per_token(full, length) * batch_size * length
    return {chip: step_flops / (MFU * flops.PEAK_BF16_FLOPS[chip]) for chip in CHIPS}


def _plain_step(model, optimizer, batch, tracing: HostTracing):
    tracing.begin()
    loss = model(**batch).loss
    tracing.lap("forward")
    loss.backward()
    tracing.lap("backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
    tracing.lap("optimizer")


def torch_adamw_state_now(optimizer, model) -> None:
    """torch's AdamW state for every weight, as device data now: torch makes it inside the first step, which would
    then be a graph of its own."""
    for parameter in model.parameters():
        optimizer.state[parameter] = {"step": torch.tensor(0.0), "exp_avg": devices.zeros_like(parameter),
                                      "exp_avg_sq": devices.zeros_like(parameter)}


class _Accelerator:
    """The one thing train_step asks of Accelerate on one device without accumulation: the backward pass."""

    @staticmethod
    def backward(loss):
        loss.backward()


def one_row(row: str, steps: int, several: int = 1) -> dict:
    """Trace `steps` steps of one row (the first ones warm up: HostTracing leaves them out); its medians in ms.
    `several`: the JAX step's calls of that many steps (--steps_per_execution), `steps` calls."""
    if row == TRAINER:
        from .measure_trainer_tracing import trainer_row

        return trainer_row(steps)
    if row.startswith("eval-"):
        return eval_row(row, steps)
    device = devices.current_device()
    torch.manual_seed(BAKED.seed)
    model = make_graph_friendly(_model({**NARROW, "max_position_embeddings": max(512, LENGTH)}))
    model.to(device).train()
    batch = {name: tensor.to(device) for name, tensor in _batch(BATCH, LENGTH).items()}
    # A call of several steps takes that many batches, each its own device tensors (a run's loader gives new ones).
    batches = [{name: tensor.to(device) for name, tensor in _batch(BATCH, LENGTH).items()} for _ in range(several)]
    tracing, whole = HostTracing(), None
    if row == "plain":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        torch_adamw_state_now(optimizer, model)
    else:
        optimizer = AdamW(model.parameters(), lr=1e-4)
        optimizer.create_state()
        if row.startswith("project-jax") or row == "project-default":
            from {{ cookiecutter.project_slug }}.xla.jax_step import WholeStep

            whole = WholeStep(model, optimizer, 1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / (2 * steps))
    clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: E731  (the layout's clip, one device)
    with compilations.counting_compilations() as compiled:
        started = time.perf_counter()
        for _ in range(steps):
            if row == "plain":
                _plain_step(model, optimizer, dict(batch), tracing)
            elif several > 1:
                parts = StepParts(model, optimizer, scheduler, clip, 1, whole, several)
                train_step(_Accelerator, parts, [dict(one) for one in batches], tracing)
            else:
                train_step(_Accelerator, StepParts(model, optimizer, scheduler, clip, 1, whole), dict(batch), tracing)
            tracing.handed_over(several)
            devices.discard_traced(device)
        wall = time.perf_counter() - started
    return figures(tracing, compiled["compilations"], wall, model)


def eval_row(row: str, steps: int) -> dict:
    """`steps` evaluation batches traced (and dropped) as the evaluation traces them: lazily, or as one JAX call."""
    from {{ cookiecutter.project_slug }}.tasks import task
    from {{ cookiecutter.project_slug }}.xla.jax_eval import WholeEval

    device = devices.current_device()
    torch.manual_seed(BAKED.seed)
    model = make_graph_friendly(_model({**NARROW, "max_position_embeddings": max(512, LENGTH)})).to(device).eval()
    batch = {name: tensor.to(device) for name, tensor in _batch(BATCH, LENGTH).items()}
    valid = torch.ones(BATCH, dtype=torch.int64).to(device)
    whole = WholeEval(model, task.eval_batch, torch.float32) if row == "eval-jax" else None
    tracing = HostTracing()
    with compilations.counting_compilations() as compiled, torch.no_grad():
        started = time.perf_counter()
        for _ in range(steps):
            tracing.begin()
            found = whole(batch, valid) if whole else task.eval_batch(model, batch, valid, torch.float32)
            tracing.lap("forward")
            tracing.handed_over()
            del found
            devices.discard_traced(device)
        wall = time.perf_counter() - started
    return figures(tracing, compiled["compilations"], wall, model)


def figures(tracing: HostTracing, compilations: int, wall: float, model) -> dict:
    """What every row returns: its steady steps' medians in ms, each phase's, and what it traced."""
    traced = tracing.seconds_per_step()
    steady = [step["step"] for step in tracing.steps[FIRST_STEPS_LEFT_OUT:]]
    return {
        "tracing_ms": traced["step"] * 1e3,
        **{f"{phase}_ms": traced.get(phase, 0.0) * 1e3 for phase in ("forward", "backward", "optimizer", "whole_step")},
        "steps_timed": traced["steady_steps"], "compilations": compilations, "wall_s": wall,
        "tensors": len(list(model.parameters())), "layers": model.config.num_hidden_layers,
        "spread_ms": (max(steady) - min(steady)) * 1e3,
    }


def all_rows(profile: Profile) -> dict:
    """Every row in this (forked) process, one after the other, and the chip's compute time beside them."""
    steps, chip = STEPS[profile.name], chip_seconds(BATCH, LENGTH)
    rows = {row: one_row(row, steps, SEVERAL.get(row, 1)) for row in ROWS if row != "project-default"}
    # auto's K on each chip, from the one-step row's host time a call; each K's row measured once.
    chosen = {name: choose(rows["project-jax"]["tracing_ms"] / 1e3, seconds, [BAKED.logging_steps])
              for name, seconds in chip.items()}
    at = {1: rows["project-jax"], **{k: rows[row] for row, k in SEVERAL.items()}}
    for k, _ in chosen.values():
        if k not in at:
            at[k] = one_row("project-default", steps, k)
    rows["project-default"] = {**at[max(k for k, _ in chosen.values())], "per_chip": {
        name: {"k": k, "why": why, "tracing_ms": at[k]["tracing_ms"]} for name, (k, why) in chosen.items()}}
    return {"rows": rows, "device": devices.device_kind(devices.current_device()),
            "chip_ms": {name: seconds * 1e3 for name, seconds in chip.items()}}
