"""The suite's sizes: `quick` (CI, a few minutes on two CPU cores), `full` (a TPU host), `data` (large corpora),
`quality` (a real pretrained model and real text, each loop over seeds), `plan` (the plan against the TPU compiler
at the default model's real size) and `compile` (the step's compile time, its layers as written against scanned).

Chosen by `--bench-profile` or the BENCH_PROFILE variable. The quick profile keeps every
question the suite asks but shrinks the models, the step counts and the grid. The data profile runs the
"data at size" group alone (test_data_at_size.py), at every corpus size with every row: minutes of host work.
"""

import os
from dataclasses import dataclass, replace

from {{ cookiecutter.project_slug }}.config import TrainConfig

PROFILE_VARIABLE = "BENCH_PROFILE"

# BERT shapes built from scratch (no download). "demo" is the project's own tiny model.
MODEL_SHAPES = {
    # Quick: bert-base's vocabulary and 4x the demo's width, but the demo's 2 layers, because
    # compiling a training step on the CPU costs seconds per layer (bert-mini's 4 layers: twice).
    "mid": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 1024},
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
}
BERT_VOCAB_SIZE = 30522  # bert-base-uncased's vocabulary: the embedding is a large share of the parameters


@dataclass(frozen=True)
class Profile:
    name: str
    precision_models: tuple[str, ...]
    # Modes run on the larger model (the demo model runs them all); None: all of them.
    larger_model_modes: tuple[str, ...] | None
    batch_size: int
    max_seq_length: int
    warmup_steps: int  # compilation happens here (the graphs compile before a steady step)
    timed_steps: int
    full_grid: bool
    eval_rounds: int  # the first evaluation compiles; the rest are steady
    grid_train_steps: int  # each eval cell trains this many steps first, as a real run does
    # The loop comparison: at least 2 epochs, and a training set that is not a multiple of the batch
    # size (a ragged last batch), so that what each loop does with ragged batches and epochs shows.
    compare_epochs: int
    compare_train_examples: int
    # The steady step against the tuned Trainer: both loops this many times, one after the other (a ratio per round).
    steady_rounds: int
    # The fine-tuning comparison of the precision levels (measure_finetuning.py): the demo model pretrained in
    # float32 for pretrain_epochs over the first pretrain_train_examples (None: all), then fine-tuned in each level
    # for finetune_epochs over the first finetune_train_examples in batches of finetune_batch_size: the same
    # optimizer steps in every level.
    pretrain_epochs: int
    pretrain_train_examples: int | None
    finetune_epochs: int
    finetune_train_examples: int | None
    finetune_batch_size: int
    finetune_seq_length: int
    # Added to XLA_FLAGS for every measurement on the XLA CPU device (conftest.py, before any child starts).
    cpu_xla_flags: str
    # The "data at size" group (measure_data_at_size.py): its corpus sizes, and whether it runs every row or the few
    # that keep the quick profile's group within 30 s on two cores.
    data_sizes: tuple[str, ...] = ("1MB",)
    # The precision group's TPU part (measure_rehearsal.py: plan.py --rehearse for each level, about a minute a row on
    # two cores): the full profile rehearses every row; the quick one only where BENCH_TPU=1 asks.
    tpu_compiler: bool = False
    data_all_rows: bool = False

    def precision_cases(self, modes) -> list[tuple[str, str]]:
        """(model, mode) pairs, fp32 first for each model: the other modes measure their drift from it."""
        cases = []
        for index, model in enumerate(self.precision_models):
            chosen = modes if index == 0 or self.larger_model_modes is None else self.larger_model_modes
            cases += [(model, mode) for mode in sorted(chosen, key=lambda name: name != "fp32")]
        return cases

    @property
    def loss_steps(self) -> int:
        """K: the loss compared with fp32 is the one after this many optimizer steps."""
        return self.warmup_steps + self.timed_steps


def _profiles() -> dict[str, Profile]:
    baked = TrainConfig()
    chosen = {
        "quick": Profile(
            name="quick", precision_models=("demo", "mid"), larger_model_modes=("fp32", "model-cast"), batch_size=8,
            max_seq_length=64, warmup_steps=3, timed_steps=5, full_grid=False, eval_rounds=3, grid_train_steps=4,
            compare_epochs=2, compare_train_examples=200, steady_rounds=3,
            # 32 tokens hold a demo sentence; 16 steps (128 examples) are enough for the lost updates to show.
            pretrain_epochs=2, pretrain_train_examples=480, finetune_epochs=1, finetune_train_examples=128,
            finetune_batch_size=8, finetune_seq_length=32,
            # Compiling is most of a short run's CPU time on XLA:CPU, and LLVM optimising the generated code most of
            # that. With it off and XLA:CPU's older loop emitters (measured on 2 cores, the quick demo: compile 13.6 s
            # -> 5.7-6.0 s, a step 0.12 s -> 0.19-0.31 s) every row compiles the same graphs in less than half the
            # time and steps about twice as slowly: the quick profile's times compare its rows, nothing more (the
            # full profile keeps XLA's defaults).
            cpu_xla_flags="--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false",
        ),
        "full": Profile(
            name="full", precision_models=("demo", "bert-base"), larger_model_modes=None,
            batch_size=baked.per_chip_train_batch(True, 1),
            max_seq_length=baked.max_seq_length, warmup_steps=5, timed_steps=20, full_grid=True, eval_rounds=5,
            grid_train_steps=5, compare_epochs=3, compare_train_examples=472, steady_rounds=5,
            pretrain_epochs=3, pretrain_train_examples=None, finetune_epochs=2, finetune_train_examples=None,
            finetune_batch_size=baked.per_chip_train_batch(False, 1), finetune_seq_length=baked.max_seq_length,
            cpu_xla_flags="", data_all_rows=True, tpu_compiler=True,
        ),
    }
    # Only test_data_at_size.py runs in it (conftest.py): the other groups' settings are quick's.
    chosen["data"] = replace(chosen["quick"], name="data", data_sizes=("1MB", "50MB", "200MB"), data_all_rows=True)
    # Only test_quality.py runs in it (conftest.py): a real pretrained model fine-tuned by each loop over seeds.
    chosen["quality"] = replace(chosen["quick"], name="quality", cpu_xla_flags="")
    # Only test_plan_accuracy.py runs in it: the default model at its real size, compiled for a TPU (an hour or more).
    chosen["plan"] = replace(chosen["quick"], name="plan")
    # Only test_compile_time.py runs in it: the default model's step at its real layer count, compiled for a TPU.
    chosen["compile"] = replace(chosen["quick"], name="compile")
    return chosen


def choose(option: str | None) -> Profile:
    """The command-line option wins over the environment; quick is the default."""
    name = option or os.environ.get(PROFILE_VARIABLE) or "quick"
    profiles = _profiles()
    if name not in profiles:
        raise ValueError(f"benchmark profile {name!r}: must be one of {', '.join(profiles)}")
    return profiles[name]
