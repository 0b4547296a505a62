"""`TrainConfig`: every option of a run, with the baked answers as defaults, checked when it is made."""

from dataclasses import dataclass, field
from pathlib import Path

from .defaults import (
    DEFAULT_DATASET,
    DEFAULT_MODEL,
    DEMO_GLOBAL_BATCH,
    DEMO_LEARNING_RATE,
    LORA_DROPOUT,
    LORA_LEARNING_RATE_FACTOR,
    PADDING_MODES,
    PARALLELISMS,
    PURE_BF16_CHOICES,
    TRAIN_BATCH_SIZE,
    ConfigError,
    switch,
)


@dataclass
class TrainConfig:
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
    num_labels: int = {{ cookiecutter.num_labels }}
{%- endif %}
    train_batch_size: int | None = field(
        default=None,
        metadata={"help": "Per chip: one process's batch with data, one chip's share of the global batch with fsdp. "
                          f"Default: {TRAIN_BATCH_SIZE}; the demo: a global batch of {DEMO_GLOBAL_BATCH} split over the chips."},
    )
    eval_batch_size: int = field(
        default={{ cookiecutter.eval_batch_size }},
        metadata={"help": "Per chip. Evaluation compiles one graph of its own at any size (its last batch is padded)."},
    )
    max_seq_length: int = {{ cookiecutter.max_seq_length }}
{%- if cookiecutter.task == "causal-lm" %}
    padding: str = field(
        default="fixed",
        metadata={"help": "fixed (packed blocks of max_seq_length tokens, one shape), longest (a text per row, padded "
        "to the longest), or dynamic (a text per row, padded per batch: recompiles)."},
    )
{%- else %}
    padding: str = field(default="fixed", metadata={"help": "fixed (one shape), buckets, or dynamic (recompiles)."})
{%- endif %}
    num_epochs: int = {{ cookiecutter.num_epochs }}
    learning_rate: float | None = field(
        default=None,
        metadata={"help": "Default: {{ cookiecutter.learning_rate }} for a pretrained model (with --lora_r ten times "
                          "that), 1e-3 for the demo."},
    )
    weight_decay: float = 0.01
    seed: int = 42
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
    checkpoint: bool = switch(True, "Save checkpoints: after every epoch, and as save_steps and save_minutes say.")
    save_steps: int | None = field(
        default=None, metadata={"help": "Also save a checkpoint every this many optimizer steps. Default: only after epochs."}
    )
    save_minutes: float | None = field(
        default=None, metadata={"help": "Also save a checkpoint when this many minutes passed since the last one."}
    )
    keep_checkpoints: int = field(default=2, metadata={"help": "How many of the newest checkpoints to keep."})
    compilation_cache: bool = switch(True, "Use PyTorch/XLA's persistent compilation cache.")
    max_train_examples: int | None = field(default=None, metadata={"help": "Use only this many training examples."})
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
        metadata={"help": "With fsdp: the class of the model's blocks to shard one by one (BertLayer). "
        "Default: the model's _no_split_modules, else the class of its repeated blocks."},
    )
    gradient_checkpointing: bool = switch(
        False, "Recompute each layer's activations in the backward pass instead of keeping them (less memory, more time)."
    )
    export: bool = switch(True, "At the end, write the model and tokenizer to OUTPUT_DIR/model with save_pretrained.")
    # LoRA (models/lora.py): adapters on a frozen base instead of full fine-tuning. The others need lora_r.
    lora_r: int | None = field(
        default=None,
        metadata={"help": "Train LoRA adapters of this rank (peft) on a frozen base: only they (and a classifier's "
                          "head) get optimizer state and go into checkpoints. Default: full fine-tuning."},
    )
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA scaling numerator (scale alpha/r). Default: 2 x lora_r."})
    lora_dropout: float | None = field(default=None, metadata={"help": f"Dropout on the adapters' input. Default: {LORA_DROPOUT}."})
    lora_target_modules: str | None = field(
        default=None,
        metadata={"help": "Comma-separated names of the layers to adapt (query,value). Default: peft's for the model "
                          "type (BERT: query,value; Llama: q_proj,v_proj)."},
    )
    merge_lora: bool = switch(
        False, "With lora_r: the export also writes OUTPUT_DIR/model-merged, the adapters merged into the base "
        "(a plain model: from_pretrained loads it without peft)."
    )
{%- if cookiecutter.task == "causal-lm" %}
    samples: int = field(
        default=2,
        metadata={"help": "After the export, print this many greedy continuations of eval prompts, generated on the "
                          "host's CPU from the exported model (nothing compiled on the device). 0: none."},
    )
{%- endif %}
    max_recompilations: int | None = field(
        default=None,
        metadata={"help": "Stop the run (exit status 2) at the next recompilation past this many. Default: no limit."},
    )

    @property
    def pretrained_learning_rate(self) -> float:
        return {{ cookiecutter.learning_rate }}

    def per_chip_train_batch(self, demo: bool, replicas: int) -> int:
        """The per-chip batch: as given, else the demo's global batch split over `replicas` chips, else the bake's."""
        if self.train_batch_size is not None:
            return self.train_batch_size
        if demo:
            return max(1, DEMO_GLOBAL_BATCH // replicas)
        return TRAIN_BATCH_SIZE

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
        return Path(self.output_dir) / "model"

    @property
    def report_path(self) -> Path:
        return Path(self.report) if self.report else Path(self.output_dir) / "report.json"

    def __post_init__(self):
        for name in ({% if cookiecutter.task != "causal-lm" %}"num_labels", {% endif %}"train_batch_size", "eval_batch_size", "max_seq_length", "num_epochs"):
            value = getattr(self, name)
            if value is None and name == "train_batch_size":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name}={value!r}: must be a positive whole number")
{%- if cookiecutter.task == "causal-lm" %}
        if not isinstance(self.samples, int) or isinstance(self.samples, bool) or self.samples < 0:
            raise ConfigError(f"samples={self.samples!r}: must be 0 or a positive whole number")
{%- endif %}
        for name in ("save_steps", "keep_checkpoints"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name}={value!r}: must be a positive whole number")
        if self.save_minutes is not None and not self.save_minutes > 0:
            raise ConfigError(f"save_minutes={self.save_minutes!r}: must be a positive number")
        if self.max_recompilations is not None and self.max_recompilations < 0:
            raise ConfigError(f"max_recompilations={self.max_recompilations!r}: must be 0 or more")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ConfigError(f"max_train_examples={self.max_train_examples!r}: must be a positive whole number")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ConfigError(f"learning_rate={self.learning_rate!r}: must be a positive number")
        if self.mixed_precision not in (None, "bf16", "no"):
            raise ConfigError(f"mixed_precision={self.mixed_precision!r}: must be bf16 or no (TPUs do not take fp16)")
        if self.pure_bf16 not in (None, *PURE_BF16_CHOICES):
            raise ConfigError(f"pure_bf16={self.pure_bf16!r}: must be one of {', '.join(PURE_BF16_CHOICES)}")
        if self.pure_bf16 not in (None, "no") and self.mixed_precision == "no":
            raise ConfigError(f"pure_bf16={self.pure_bf16!r} needs mixed_precision=bf16 (float32 was asked for)")
        if self.parallelism not in PARALLELISMS:
            raise ConfigError(f"parallelism={self.parallelism!r}: must be one of {', '.join(PARALLELISMS)}")
        if self.fsdp_layer_class and self.parallelism != "fsdp":
            raise ConfigError("fsdp_layer_class is for parallelism='fsdp' only")
        if self.padding not in PADDING_MODES:
            raise ConfigError(f"padding={self.padding!r}: must be one of {', '.join(PADDING_MODES)}")
        self._check_lora()

    def _check_lora(self):
        if self.lora_r is None:
            for name in ("lora_alpha", "lora_dropout", "lora_target_modules", "merge_lora"):
                if getattr(self, name) not in (None, False):
                    raise ConfigError(f"{name}={getattr(self, name)!r} is for LoRA: set lora_r too (or leave {name} out)")
            return
        if not isinstance(self.lora_r, int) or isinstance(self.lora_r, bool) or self.lora_r < 1:
            raise ConfigError(f"lora_r={self.lora_r!r}: must be a positive whole number (the adapters' rank)")
        if self.lora_alpha is not None and not self.lora_alpha > 0:
            raise ConfigError(f"lora_alpha={self.lora_alpha!r}: must be a positive number")
        if self.lora_dropout is not None and not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"lora_dropout={self.lora_dropout!r}: must be at least 0 and below 1")
        if self.lora_target_modules is not None and not [n for n in self.lora_target_modules.split(",") if n.strip()]:
            raise ConfigError(f"lora_target_modules={self.lora_target_modules!r}: must name layers, comma-separated")
        if self.merge_lora and not self.export:
            raise ConfigError("merge_lora=True: merging happens at the export; it needs export=true")

    @property
    def resolved_lora_alpha(self) -> float:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_r

    @property
    def resolved_lora_dropout(self) -> float:
        return self.lora_dropout if self.lora_dropout is not None else LORA_DROPOUT
