"""The causal-LM loop against TRL's SFTTrainer, each run in its own (forked) process, watched for recompilations.

  project_loop   the project's `training_function` on the LM demo, on one XLA device or FSDPv2 over four;
  sft_loop       BASELINE, not the project's code: `trl.SFTTrainer` as a user writes it, and set up as
                 Accelerate's TPU example (examples/finetune_lm_tpu.py) sets it up: SPMD FSDPv2, packing,
                 dataloader_drop_last.

One workload for every row (WORKLOAD): the demo's tiny Llama built by tasks/causal_lm.build_model with the same
seed, the same packed blocks of max_seq_length tokens, the same global batch, optimizer steps (epochs over the
same blocks), learning rate and evaluation after every epoch, in float32. Every loop is watched by the project's
graph watch (graph_watch.GraphWatch), which counts its recompilations and names their causes. The steady speed is
the same figure in every row: real tokens per optimizer step over the watch's steady step time (the median time
between two training steps that compiled nothing).

A configuration that cannot run on XLA here gives a row with its error (`failed_row`), not a missing row.
"""

import os
import re
import statistics
import time
from dataclasses import dataclass

from {{ cookiecutter.project_slug }}.config import DEMO_GLOBAL_BATCH, DEMO_LEARNING_RATE, TrainConfig
from {{ cookiecutter.project_slug }}.loop import training
from {{ cookiecutter.project_slug }}.precision import levels as precision
from {{ cookiecutter.project_slug }}.tasks import task
from {{ cookiecutter.project_slug }}.watch import compilations, flops
from {{ cookiecutter.project_slug }}.xla import device as devices

from .baseline_watch import baseline_watch, recording, trainer_callback
from .profiles import Profile
from .rounds import over_rounds

FSDP_DEVICES = 4  # Accelerate's example runs on a v5litepod-8; four XLA:CPU devices in one SPMD process here


@dataclass(frozen=True)
class Workload:
    """What every row trains: the same blocks, batch, steps and learning rate, float32."""

    max_seq_length: int
    epochs: int
    train_blocks: int  # a multiple of the global batch: every loop takes the same optimizer steps, none ragged
    global_batch: int = DEMO_GLOBAL_BATCH
    learning_rate: float = DEMO_LEARNING_RATE

    @property
    def optimizer_steps(self) -> int:
        return self.epochs * (self.train_blocks // self.global_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.max_seq_length  # packed blocks: every token real


def workload(profile: Profile) -> Workload:
    """Quick: 8 steps an epoch (the watch's 3 warm-up steps, then steady ones) for 2 epochs; full: 3 longer epochs."""
    if profile.name == "quick":
        return Workload(profile.max_seq_length, epochs=2, train_blocks=8 * DEMO_GLOBAL_BATCH)
    return Workload(profile.max_seq_length, epochs=3, train_blocks=32 * DEMO_GLOBAL_BATCH)


# Every difference between the loops compared. The same in all: the model and its seed, the blocks, global batch 16,
# optimizer steps, learning rate, evaluation after each epoch, float32.
LOOP_DIFFERENCES = {
    "project": "the project's training_function on one XLA device: every batch one shape (packed blocks), the eval's "
               "short last block padded and masked, eval batch = train batch, the loss and the eval sums read on the "
               "host once per epoch, transformers' eager mask built in the graph, AdamW with weight decay 0.01, "
               "linear decay from the learning rate, gradient clipping at 1.0 (as SFTTrainer)",
    "project-fsdp": f"the same loop with --parallelism fsdp on {FSDP_DEVICES} XLA:CPU devices in one SPMD process "
                    f"(FSDPv2, each Llama layer sharded, batches split along the fsdp axis): {DEMO_GLOBAL_BATCH // 4} "
                    "blocks per device, the like-for-like row for SFTTrainer on FSDPv2",
    "sft-as-written": "trl.SFTTrainer with SFTConfig's defaults apart from the workload (model, blocks, epochs, "
                      "learning rate, batch, max_length, bf16=False for float32, eval each epoch): the blocks given "
                      "pre-tokenized (input_ids: trl skips its tokenization), no packing, its collator padding each "
                      "batch to its longest row (the eval's short last block too), eval batch 8, gradient "
                      "checkpointing on, fused AdamW, weight decay 0, gradient clipping at 1.0, entropy and token "
                      "accuracy read on the host in every step, a log every 10 steps, transformers' own eager mask",
    "sft-runs-on-xla": "sft-as-written with the two settings without which it does not train on XLA: "
                       "gradient_checkpointing=False (torch's non-reentrant checkpoint looks for a torch.xla module "
                       "and fails) and optim='adamw_torch' (fused AdamW refuses XLA tensors)",
    "sft-tpu-example": "SFTTrainer as Accelerate's examples/finetune_lm_tpu.py sets it up: fsdp='full_shard' with "
                       "fsdp_config xla=True, xla_fsdp_v2=True, xla_fsdp_grad_ckpt=True and the decoder layer class "
                       f"to wrap, on {FSDP_DEVICES} XLA:CPU devices (SPMD), packing=True (trl's best-fit packing, "
                       "which turns on its padding-free batches: one row of the batch's tokens with position ids), "
                       "dataloader_drop_last=True, gradient_checkpointing=False, a log every step; per-device batch "
                       f"{DEMO_GLOBAL_BATCH}, because under SPMD one process feeds every device (global "
                       f"{DEMO_GLOBAL_BATCH}); optim='adamw_torch' (the workload's AdamW) for the example's Adafactor; "
                       "otherwise as sft-as-written. Not taken from the example, since the workload fixes them: LoRA, "
                       "Adafactor, bf16 weights, its data set and model",
}


def _config(work: Workload, output_dir: str, **overrides) -> TrainConfig:
    settings = {
        "demo": True, "max_seq_length": work.max_seq_length, "num_epochs": work.epochs,
        "max_train_examples": work.train_blocks, "learning_rate": work.learning_rate, "mixed_precision": "no",
        "checkpoint": False, "compilation_cache": False, "export": False, "output_dir": output_dir, **overrides,
    }
    return TrainConfig(**settings)


def _use_devices(count: int) -> None:
    """XLA:CPU devices for this (fresh) process; read when its runtime starts, so before any tensor reaches one."""
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = str(count)


def _row(loop: str, work: Workload, graphs, compile_seconds, recompilations, causes: dict, steady_step_s, wall,
         flops_per_token: int, **figures) -> dict:
    tokens_per_second = work.tokens_per_step / steady_step_s if steady_step_s else None
    return {
        "loop": loop, "differences": LOOP_DIFFERENCES[loop], "status": "ok", "graphs": graphs,
        "recompilations": recompilations,
        # Library frames named from their package on (the venv's path says nothing).
        "recompilation_causes": re.sub(r"[^\s(]*site-packages/", "", "; ".join(f"{key} x{n}" for key, n in causes.items()))
        or "none",
        "compile_seconds": compile_seconds,
        "steady_tokens_per_second": tokens_per_second,
        # Computed from the tokens per second and the model's FLOPs per token (watch/flops.py), over the devices.
        "model_flops_per_second_per_chip": flops_per_token * tokens_per_second / figures["devices"]
        if tokens_per_second else None,
        "steady_step_s": steady_step_s, "wall_s": wall, "optimizer_steps": work.optimizer_steps,
        "max_seq_length": work.max_seq_length, "global_batch": work.global_batch, **figures,
    }


def failed_row(loop: str, error: str) -> dict:
    """A configuration that did not run here: its error, in one line, where it was raised, in place of the figures."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip() and not line.startswith("(exit code")]
    frames = [line for line in lines if line.startswith("File ") and "/torch/" not in line]
    where = ""
    if frames:  # the innermost frame outside torch: the library call that gave up
        path, _, rest = frames[-1].removeprefix("File ").partition(", line ")
        line, _, function = rest.partition(", in ")
        where = f" (at {'/'.join(path.strip(chr(34)).split('/')[-2:])}:{line} {function})"
    message = lines[-1] if lines else "failed without a message"
    return {"loop": loop, "differences": LOOP_DIFFERENCES[loop], "status": "error", "reason": f"{message[:240]}{where}"}


def project_loop(profile: Profile, output_dir: str, fsdp: bool = False) -> dict:
    """The project's loop, as `train.py --demo` runs it (one device, or --parallelism fsdp over FSDP_DEVICES)."""
    work = workload(profile)
    count = FSDP_DEVICES if fsdp else 1
    _use_devices(count)
    per_device = work.global_batch // count
    config = _config(work, output_dir, parallelism="fsdp" if fsdp else "data", train_batch_size=per_device,
                     eval_batch_size=per_device)
    started = time.perf_counter()
    report = training.training_function(config=config)
    wall = time.perf_counter() - started
    steps = report["epochs_run"] * (report["train_examples"] // report["train_batch"]["global"])
    assert steps == work.optimizer_steps, (steps, work)
    return _row(
        "project-fsdp" if fsdp else "project", work, report["xla_compilations"], report["compile_seconds"],
        report["recompilations"], report["graphs"]["recompilation_causes"], report["steady_step_seconds"], wall,
        report["flops"]["model_flops_per_token"], devices=report["layout"].get("devices", count), device=report["device"], eval_loss=report["eval_loss"],
    )


def _stock_eager_mask() -> None:
    """transformers' own eager mask, as a user of SFTTrainer has it.

    Importing the project's modeling.py registers its in-graph mask for every model of the process (modeling.py
    says why); the baseline must not get the project's fix.
    """
    from transformers import AttentionMaskInterface
    from transformers.masking_utils import eager_mask

    AttentionMaskInterface.register("eager", eager_mask)


def _real_blocks(blocks) -> list[list[int]]:
    """Each packed block's real tokens (the eval's short last block without its padding)."""
    return [[token for token, real in zip(ids, mask, strict=True) if real]
            for ids, mask in zip(blocks["input_ids"], blocks["attention_mask"], strict=True)]


# The least that SFTConfig's defaults need to train on XLA at all (each default fails there: see LOOP_DIFFERENCES).
RUNS_ON_XLA = {"gradient_checkpointing": False, "optim": "adamw_torch"}
SFT_SETUPS = ("sft-as-written", "sft-runs-on-xla", "sft-tpu-example")


def sft_settings(setup: str, layer_class: str) -> dict:
    """The SFTConfig arguments of a set-up beyond the workload's."""
    if setup == "sft-as-written":
        return {}
    if setup == "sft-runs-on-xla":
        return dict(RUNS_ON_XLA)
    return {  # Accelerate's examples/finetune_lm_tpu.py
        "fsdp": "full_shard",
        "fsdp_config": {"transformer_layer_cls_to_wrap": [layer_class], "xla": True, "xla_fsdp_v2": True,
                        "xla_fsdp_grad_ckpt": True},
        "packing": True, "dataloader_drop_last": True, "gradient_checkpointing": False, "logging_steps": 1,
        "optim": RUNS_ON_XLA["optim"],  # the workload's AdamW, for the example's Adafactor
    }


def sft_loop(profile: Profile, output_dir: str, setup: str = "sft-as-written") -> dict:
    """BASELINE, not the project's code: trl.SFTTrainer on the same workload, watched by the project's watch."""
    import datasets

    tpu_example = setup == "sft-tpu-example"
    work = workload(profile)
    count = FSDP_DEVICES if tpu_example else 1
    _use_devices(count)
    if tpu_example:  # the example's first line: FSDPv2 needs SPMD, switched on before the runtime starts
        import torch_xla.runtime as xr

        xr.use_spmd()
    precision.set_xla_variables("fp32")
    watch = baseline_watch(output_dir, "fixed")
    _stock_eager_mask()
    started = time.perf_counter()
    with compilations.counting_compilations() as compiled:
        from trl import SFTConfig, SFTTrainer

        config = _config(work, output_dir)
        _, tokenizer, train_blocks, eval_blocks = task.load_examples(config, demo=True)
        train = datasets.Dataset.from_dict({"input_ids": _real_blocks(train_blocks)})
        evaluation = datasets.Dataset.from_dict({"input_ids": _real_blocks(eval_blocks)})
        model = task.build_model(config, demo=True, vocab_size=len(tokenizer))
        flops_per_token = flops.model_flops_per_token(model, work.max_seq_length)  # the same model as the project's
        arguments = SFTConfig(
            output_dir=output_dir, num_train_epochs=work.epochs, learning_rate=work.learning_rate,
            per_device_train_batch_size=work.global_batch, max_length=work.max_seq_length, bf16=False,
            eval_strategy="epoch", seed=config.seed, disable_tqdm=True,
            **sft_settings(setup, type(model.model.layers[0]).__name__),
        )
        seen = {}  # the last batch collated, the last eval metrics
        trainer = SFTTrainer(model=model, args=arguments, train_dataset=train, eval_dataset=evaluation,
                             processing_class=tokenizer, callbacks=[trainer_callback(watch, seen)])
        trainer.data_collator = recording(trainer.data_collator, seen)  # trl builds its own collator
        trainer.train()  # evaluates after every epoch
    wall = time.perf_counter() - started
    steps = trainer.state.global_step
    assert steps == work.optimizer_steps, (steps, work)
    return _row(
        setup, work, compiled["compilations"], compiled["compile_seconds"], watch.recompilations,
        watch.recompilation_causes(), watch.steady_step_seconds(), wall, flops_per_token, devices=count,
        device=devices.device_kind(trainer.args.device), eval_loss=seen.get("metrics", {}).get("eval_loss"),
    )


# The rows, in the order they run (the project's first: every other row's ratios are to it): (function, argument).
LOOPS = {
    "project": (project_loop, False),
    "project-fsdp": (project_loop, True),
    **{setup: (sft_loop, setup) for setup in SFT_SETUPS},
}


# The SFTTrainer set-up the lead is taken over: the one that trains on XLA here (the others stop with their error).
LEAD_OVER = "sft-runs-on-xla"


def lead_over_rounds(project_rows: list[dict], sft_rows: list[dict]) -> dict:
    """The project's tokens per second over SFTTrainer's, their rows run one after the other round after round: the
    median of the rounds' ratios (above 1, the project's loop is faster), their range, and each loop's median."""
    lead, lead_range = over_rounds([row["steady_tokens_per_second"] for row in project_rows],
                                   [row["steady_tokens_per_second"] for row in sft_rows])
    wall, wall_range = over_rounds([row["wall_s"] for row in project_rows], [row["wall_s"] for row in sft_rows])
    return {
        "project_tokens_per_second": statistics.median(row["steady_tokens_per_second"] for row in project_rows),
        "sft_tokens_per_second": statistics.median(row["steady_tokens_per_second"] for row in sft_rows),
        "tokens_per_second_lead": lead, "lead_range": lead_range, "wall_vs_sft": wall, "wall_range": wall_range,
        "rounds": len(project_rows), "against": LEAD_OVER,
    }


def measure(loop: str, profile: Profile, output_dir: str) -> dict:
    """One row, in a fresh forked process; a configuration that fails there gives its error row."""
    from . import isolation

    function, argument = LOOPS[loop]
    try:
        return isolation.run(function, profile, output_dir, argument)
    except isolation.ChildFailed as error:
        return failed_row(loop, str(error))


def ratios(row: dict, project: dict) -> dict:
    """A row's figures over the project's (None where either did not run or has no figure)."""
    def over(key):
        mine, theirs = row.get(key), project.get(key)
        return mine / theirs if mine is not None and theirs else None

    return {"graphs_vs_project": over("graphs"), "tokens_per_second_vs_project": over("steady_tokens_per_second"),
            "wall_vs_project": over("wall_s")}
