"""`TrainConfig`: every option of a run, with the baked answers as defaults, checked when it is made.

Flat, as the command line, the notebook and a checkpoint's settings.json name them; `config.data`, `config.model`, ...
hand out the options grouped by concern (groups.py), and each part of the package is handed the group it reads.
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

from .checks import check
from .defaults import (
    DEFAULT_DATASET,
    DEFAULT_MODEL,
    DEMO_GLOBAL_BATCH,
    DEMO_LEARNING_RATE,
    EVAL_BATCH_SIZE,
    LORA_DROPOUT,
    LORA_LEARNING_RATE_FACTOR,
    OPTIMIZERS,
    SCHEDULES,
    STEP_FUNCTIONS,
    TRACKERS,
    TRAIN_BATCH_SIZE,
    switch,
)
from .groups import Grouped


@dataclass
class TrainConfig(Grouped):
    demo: bool | None = switch(
        None, "Train the offline demo ({{ 'tiny Llama' if cookiecutter.task == 'causal-lm' else 'tiny BERT' }}, shipped data). "
        "Default: only when the hub cannot be reached."
    )
    model_name_or_path: str = field(default=DEFAULT_MODEL, metadata={"help": "Hub id or local folder of the model."})
    dataset: str = field(
        default=DEFAULT_DATASET,
        metadata={"help": f"Hub data set as name/config ({DEFAULT_DATASET}), a local folder laid out like one, or 'files' "
        "to use --train_file/--eval_file."},
    )
    train_file: str | None = field(default=None, metadata={"help": "Local CSV or JSON lines file for training."})
    eval_file: str | None = field(default=None, metadata={"help": "Local CSV or JSON lines file for evaluation."})
{%- if cookiecutter.task == "causal-lm" %}
    text_column: str | None = field(default=None, metadata={"help": "Text column (default: text)."})
{%- else %}
    text_column: str | None = field(default=None, metadata={"help": "Text column (default: sentence1 or text)."})
    # The classifier's own options: a causal-LM project is generated without them.
    text_pair_column: str | None = field(default=None, metadata={"help": "Second text column, if any."})
    label_column: str = field(default="label", metadata={"help": "Label column (integers 0..num_labels-1)."})
    num_labels: int = field(default={{ cookiecutter.num_labels }}, metadata={"help": "Classes: labels are 0..num_labels-1."})
{%- endif %}
    train_batch_size: int | None = field(
        default=None,
        metadata={"help": "Per chip: one process's batch with data, one chip's share of the global batch with fsdp. "
                          f"Default: {TRAIN_BATCH_SIZE}; the demo: a global batch of {DEMO_GLOBAL_BATCH} split over the chips."},
    )
    gradient_accumulation_steps: int = field(
        default=1,
        metadata={"help": "Micro-batches of train_batch_size per optimizer step, run one at a time: the global batch "
                          "is train_batch_size x chips x this. At most two graphs more, whatever it is."},
    )
    eval_batch_size: int | None = field(default=None, metadata={"help": "Per chip; evaluation compiles one graph of its "
        "own at any size (its last batch padded). Default: " + (f"{EVAL_BATCH_SIZE}, the bake's answer" if EVAL_BATCH_SIZE
        else "the run's train batch per chip, so that it fits where the step does") + "."})
    max_seq_length: int = field(
        default={{ cookiecutter.max_seq_length }},
        metadata={"help": "{{ 'Tokens in a packed block' if cookiecutter.task == 'causal-lm' else 'Tokens a text is cut and padded to' }}: "
                          "every batch has this length. At most the model's max_position_embeddings."},
    )
{%- if cookiecutter.task == "causal-lm" %}
    padding: str = field(
        default="fixed",
        metadata={"help": "fixed (packed blocks of max_seq_length tokens, one shape), longest (a text per row, padded "
        "to the longest), or dynamic (a text per row, padded per batch: recompiles)."},
    )
{%- else %}
    padding: str = field(default="fixed", metadata={"help": "fixed (one shape), buckets, or dynamic (recompiles)."})
{%- endif %}
    num_epochs: int = field(default={{ cookiecutter.num_epochs }}, metadata={"help": "Passes over the training data."})
    max_steps: int | None = field(default=None, metadata={"help": "Stop after this many optimizer steps, inside an "
        "epoch if need be: the schedule and the checkpoints follow it, and --num_epochs becomes a maximum."})
    eval_steps: int | None = field(default=None, metadata={"help": "Also evaluate every this many optimizer steps, "
        "inside epochs (the one eval graph). Default: after each epoch only."})
    metric_for_best_model: str = field(default="loss", metadata={"help": "The eval metric that picks the best evaluation: {{ 'loss or perplexity, lower is better' if cookiecutter.task == 'causal-lm' else 'loss (lower is better), accuracy, macro_f1 or roc_auc (higher)' }}; the eval_ prefix is allowed."})
    load_best_model_at_end: bool = switch(False, "Export the best evaluation's weights, not the last (each better one's "
        "are written to OUTPUT_DIR/best-model).")
    early_stopping_patience: int | None = field(default=None, metadata={"help": "End the run after this many evaluations "
        "in a row that do not improve --metric_for_best_model. Default: never."})
    logging_steps: int = field(default=10, metadata={"help": "Every this many optimizer steps, log loss, learning rate, "
        "gradient norm and speed per chip (read on a thread of its own) to OUTPUT_DIR/metrics.jsonl and --report_to. 0: none."})
    report_to: str = field(default="tensorboard", metadata={"help": f"Where the logs also go (Accelerate's trackers): "
                           f"{', '.join(TRACKERS)}; tensorboard writes OUTPUT_DIR/tensorboard."})
    profile_steps: str | None = field(default=None, metadata={"help": "A-B (or A): trace optimizer steps A to B with "
                                      "torch_xla's profiler into OUTPUT_DIR/profile (TensorBoard's profile plugin)."})
    learning_rate: float | None = field(default=None, metadata={"help": "Default: {{ cookiecutter.learning_rate }} for a "
                                        "pretrained model (with --lora_r ten times that), 1e-3 for the demo."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW's decoupled weight decay."})
    optim: str = field(
        default="adamw",
        metadata={"help": f"The optimizer: {' or '.join(OPTIMIZERS)} (transformers' Adafactor at the run's learning rate "
                          "and schedule: a factored second moment and no first, less state per weight)."},
    )
    lr_scheduler_type: str = field(
        default="linear",
        metadata={"help": f"How the learning rate moves over the optimizer steps: {', '.join(SCHEDULES)} (transformers' "
                          "get_scheduler; the linear and cosine ones decay to 0). No value of it compiles a graph."},
    )
    warmup_ratio: float = field(default=0.0, metadata={"help": "The fraction of the optimizer steps over which the "
                                "rate rises from 0 (0 to <1)."})
    warmup_steps: int = field(default=0, metadata={"help": "Optimizer steps of warm-up from 0, instead of --warmup_ratio."})
    step_function: str = field(default="auto", metadata={"help": f"How a step reaches XLA: {', '.join(STEP_FUNCTIONS)}. "
        "jax traces the whole step once as a JAX function and replays it (needs jax, in the tpu and xla-cpu extras); "
        "lazy traces every operation in Python every step; auto takes jax wherever it can run and says why where "
        "it cannot (docs/chip-waiting.md)."})
    steps_per_execution: str = field(default="auto", metadata={"help": "Optimizer steps a call of the JAX step: auto or K "
        "(logs, saves, evaluations fall between calls); auto: 1 on XLA:CPU, on a TPU measured (docs/chip-waiting.md)."})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "Clip the gradients' global norm to this, in the graph (transformers' Trainer's "
                                       "default); 0 turns clipping off."}
    )
    seed: int = field(default=42, metadata={"help": "Seeds the model's initialisation, the shuffle and dropout."})
    mixed_precision: str | None = field(
        default=None,
        metadata={"help": "bf16 (bf16 compute; weights as --pure_bf16 says) or no (float32 throughout). "
                          "Default: accelerate launch's setting, else {{ cookiecutter.mixed_precision }}."},
    )
    pure_bf16: str | None = field(
        default=None,
        metadata={"help": "With bf16, where weights, gradients and optimizer state live: no = float32 (every "
                          "update kept; matmuls in bf16 under torch.autocast); xla = XLA_USE_BF16, downcast = "
                          "XLA_DOWNCAST_BF16 (float64 kept as float32), cast = model.to(torch.bfloat16): half "
                          "the bytes, but AdamW updates below half a bf16 step of their weight round away "
                          "(most of them at a fine-tuning learning rate) unless --kahan_summation. "
                          "Default: accelerate launch's setting, else {{ cookiecutter.pure_bf16 }}."},
    )
    kahan_summation: bool = switch(
        False, "With pure bf16 weights: keep the part of each update that rounding drops (optimi's AdamW, "
        "one more weight-sized bf16 buffer)."
    )
    output_dir: str = field(default="outputs", metadata={"help": "Checkpoints, compilation cache and report."})
    report: str | None = field(default=None, metadata={"help": "Report JSON path (default: OUTPUT_DIR/report.json)."})
    resume: bool = switch(False, "Continue from the last complete checkpoint (mid-epoch ones too).")
    overwrite_output_dir: bool = switch(False, "Start over in an output_dir an earlier run used: remove its checkpoints, "
                                        "model, metrics, report and curves first. Without it (or resume), such a folder is refused.")
    checkpoint: bool = switch(True, "Save checkpoints: after every epoch, and as save_steps and save_minutes say.")
    save_steps: int | None = field(default=None, metadata={"help": "Also save a checkpoint every this many optimizer "
                                   "steps. Default: only after epochs."})
    save_minutes: float | None = field(default=None, metadata={"help": "Also save a checkpoint when this many minutes "
                                       "passed since the last one."})
    keep_checkpoints: int = field(default=2, metadata={"help": "How many of the newest checkpoints to keep."})
    compilation_cache: bool = switch(
        False, "Write PyTorch/XLA's persistent compilation cache to OUTPUT_DIR/xla-cache. Off by default: torch_xla "
        "2.9.0 cannot read it back on a TPU (pytorch/xla issue 9094) nor on the CPU, so it costs writes and saves no "
        "compilation; the report's compilation_cache says what it did."
    )
    max_train_examples: int | None = field(default=None, metadata={"help": "Use only this many training examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes that tokenize{{ ' and pack' if cookiecutter.task == 'causal-lm' else '' }} "
        "the data (datasets' map), once: the next run reads the cache (HF_DATASETS_CACHE). Default: the host's cores, at most 8."})
    watch_compilations: bool = switch(
        True, "Watch every XLA compilation: list the graphs in the report and explain each recompilation."
    )
    parallelism: str = field(
        default={{ cookiecutter.parallelism | tojson }},
        metadata={"help": "data (one process per chip, a full replica on each) or fsdp (SPMD FSDPv2: one process "
        "per host, parameters, gradients and optimizer state sharded over every chip)."},
    )
    fsdp_layer_class: str | None = field(
        default=None,
        metadata={"help": "With fsdp: the class of the model's blocks to shard one by one "
        "({{ 'Qwen2DecoderLayer' if cookiecutter.task == 'causal-lm' else 'BertLayer' }}). "
        "Default: the model's _no_split_modules, else the class of its repeated blocks."},
    )
    gradient_checkpointing: bool = switch(
        False, "Recompute each layer's activations in the backward pass instead of keeping them (less memory, more time)."
    )
    export: bool = switch(True, "At the end, write the model and tokenizer to OUTPUT_DIR/model with save_pretrained.")
    # LoRA (models/lora.py): adapters on a frozen base instead of full fine-tuning. The others need lora_r.
    lora_r: int | None = field(default=None, metadata={"help": "Train LoRA adapters of this rank (peft) on a frozen "
        "base: only they (and a classifier's head) get optimizer state and go into checkpoints. Default: full fine-tuning."})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA scaling numerator (scale alpha/r). Default: 2 x lora_r."})
    lora_dropout: float | None = field(default=None, metadata={"help": f"Dropout on the adapters' input. Default: {LORA_DROPOUT}."})
    lora_target_modules: str | None = field(default=None, metadata={"help": "Comma-separated names of the layers to "
        "adapt (query,value). Default: peft's for the model type (BERT: query,value; Llama: q_proj,v_proj)."})
    merge_lora: bool = switch(False, "With lora_r: the export also writes OUTPUT_DIR/model-merged, the adapters merged "
                              "into the base (a plain model: from_pretrained loads it without peft).")
    lora_frozen_float32: bool = switch(False, "With lora_r and bf16 autocast: keep the frozen base in float32. Default: "
                                       "bf16, half its bytes (the adapters, a head and their optimizer state stay float32).")
{%- if cookiecutter.task == "causal-lm" %}
    samples: int = field(default=2, metadata={"help": "After the export, print this many greedy continuations of eval "
        "prompts, generated on the host's CPU from the exported model (nothing compiled on the device). 0: none."})
    streaming: bool = switch(False, "Read the train split as a stream while training (datasets' streaming: data larger "
        "than the disk, never downloaded whole); needs max_steps, the run's one epoch.")
{%- endif %}
    max_recompilations: int | None = field(default=None, metadata={"help": "Stop the run (exit status 2) at the next "
                                           "recompilation past this many. Default: no limit."})

    @property
    def pretrained_learning_rate(self) -> float:
        return {{ cookiecutter.learning_rate }}

    def warmup_for(self, optimizer_steps: int) -> int:
        """Warm-up in optimizer steps: as given, or the ratio of the run rounded up (as transformers' Trainer does)."""
        return self.warmup_steps or math.ceil(self.warmup_ratio * optimizer_steps)

    def per_chip_train_batch(self, demo: bool, replicas: int) -> int:
        """The per-chip (micro-)batch: as given, else the demo's global batch split over `replicas` chips and the
        accumulated micro-batches, else the bake's."""
        if self.train_batch_size is not None:
            return self.train_batch_size
        if demo:
            return max(1, DEMO_GLOBAL_BATCH // (replicas * self.gradient_accumulation_steps))
        return TRAIN_BATCH_SIZE

    def per_chip_eval_batch(self, train_batch: int) -> int:
        """As given, else the bake's other answer, else `train_batch`, the run's own (defaults.EVAL_BATCH_SIZE: why)."""
        return self.eval_batch_size or EVAL_BATCH_SIZE or train_batch

    def resolved_learning_rate(self, demo: bool) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        if demo:
            return DEMO_LEARNING_RATE
        if self.lora_r is not None:
            return self.pretrained_learning_rate * LORA_LEARNING_RATE_FACTOR
        return self.pretrained_learning_rate

    @property
    def export_dir(self) -> Path:
        return self.checkpoints.export_dir

    @property
    def report_path(self) -> Path:
        return self.checkpoints.report_path

    def __post_init__(self):
        check(self)
