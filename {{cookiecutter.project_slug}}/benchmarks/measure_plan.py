"""Plan against the TPU compiler: plan.py's estimate of a step's peak memory per device beside the TPU compiler's own
(plan.py --compile: libtpu compiles the step for the slice here, without a TPU).

Each row is one plan.py run in a fresh process (forked: project_runs.run_command), reading a folder that holds only a
config.json: an architecture at its real size (`--bench-profile plan`: minutes a row, single-threaded, 6-13 GB of host
memory), or the default one narrowed (the quick profile: one layer 64 wide, seconds). The data layout's rows compile
the slice's program with the weights whole on each chip, fsdp's with weights, gradients and moments split.

Fitting and checking are kept apart: a row's `role` says whether planning/estimate.py's coefficients were fitted to
it ("fit") or it checks them out of sample ("check": architectures, lengths, chips and settings nothing was fitted
to). The plan profile writes every row to RESULTS_NAME in the results folder; docs/plan.md's matrix table is
written from the committed copy, docs/plan-matrix.json, by scripts/plan_matrix.py.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from {{ cookiecutter.project_slug }}.config import DEFAULT_MODEL
from {{ cookiecutter.project_slug }}.tasks import task

from .project_runs import run_command

# Real shapes, as each model's config.json on the hub gives them (nothing is downloaded), and the task that trains it.
REAL_SHAPES = {
    "bert-base-cased": ("BertConfig", {"vocab_size": 28996}),
    "Qwen/Qwen2.5-0.5B": ("Qwen2Config", {
        "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
        "tie_word_embeddings": True, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}),
    "FacebookAI/roberta-large": ("RobertaConfig", {
        "vocab_size": 50265, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
        "intermediate_size": 4096, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1}),
    "distilbert-base-uncased": ("DistilBertConfig", {
        "vocab_size": 30522, "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072,
        "max_position_embeddings": 512}),
    "microsoft/deberta-v3-base": ("DebertaV2Config", {
        "vocab_size": 128100, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "max_position_embeddings": 512, "relative_attention": True, "position_buckets": 256,
        "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False, "type_vocab_size": 0, "max_relative_positions": -1}),
    "answerdotai/ModernBERT-base": ("ModernBertConfig", {
        "vocab_size": 50368, "hidden_size": 768, "intermediate_size": 1152, "num_hidden_layers": 22,
        "num_attention_heads": 12, "max_position_embeddings": 8192, "global_attn_every_n_layers": 3,
        "local_attention": 128}),
    "meta-llama/Llama-3.2-1B": ("LlamaConfig", {
        "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "rope_theta": 500000.0, "head_dim": 64}),
    "google/gemma-2-2b": ("Gemma2Config", {
        "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
        "sliding_window": 4096, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
        "query_pre_attn_scalar": 256}),
}
DECODERS = {"Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.2-1B", "google/gemma-2-2b"}
NARROWED = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
            "max_position_embeddings": 128}
TARGETS = {"data": "v5e-1", "fsdp": "v5e-4"}
RESULTS_NAME = "plan-matrix.json"


@dataclass(frozen=True)
class Row:
    batch: int
    layout: str
    precision: str  # --mixed_precision: bf16 (autocast, float32 weights) or no
    lora_r: int | None = None
    model: str = DEFAULT_MODEL
    length: int = 128
    tpu: str | None = None  # default: TARGETS[layout]
    checkpointing: bool = False
    role: str = "fit"  # fit: estimate.py's coefficients were fitted to it; check: out of sample
    # LoRA's frozen base kept in float32 (--lora_frozen_float32): the LoRA rows measured before it went bf16 by
    # default keep the recipe they were measured at.
    lora_frozen_float32: bool = False

    @property
    def target(self) -> str:
        return self.tpu or TARGETS[self.layout]

    @property
    def name(self) -> str:
        lora = f"-lora{self.lora_r}" if self.lora_r else ""
        model = "" if self.model == DEFAULT_MODEL and self.role == "fit" else f"{self.model.rpartition('/')[2]}-"
        where = f"-{self.tpu}" if self.tpu else ""
        return (f"{model}{self.layout}-{self.precision}-{self.batch}x{self.length}{lora}"
                f"{'-checkpointed' if self.checkpointing else ''}{where}")

    @property
    def task(self) -> str:
        return "causal-lm" if self.model in DECODERS else "text-classification"


def _checks() -> tuple:
    """The out-of-sample rows: six architectures beyond the defaults, 128 to 2,048 tokens, v5e, v6e and v5p, both
    layouts, float32 once, LoRA and gradient checkpointing once each; and Qwen2.5-0.5B at 2,048 tokens."""
    check = lambda model, batch, length, tpu, layout="data", precision="bf16", **more: Row(  # noqa: E731
        batch, layout, precision, model=model, length=length, tpu=tpu, role="check", **more)
    return (
        check("FacebookAI/roberta-large", 16, 128, "v6e-1"),
        check("FacebookAI/roberta-large", 8, 512, "v6e-4", "fsdp"),
        check("distilbert-base-uncased", 32, 128, "v5e-1", precision="no"),
        check("microsoft/deberta-v3-base", 8, 512, "v6e-1"),
        check("answerdotai/ModernBERT-base", 4, 2048, "v6e-1"),
        check("meta-llama/Llama-3.2-1B", 8, 512, "v6e-1"),
        check("meta-llama/Llama-3.2-1B", 2, 2048, "v5p-8", "fsdp"),
        check("meta-llama/Llama-3.2-1B", 8, 512, "v6e-1", lora_r=8, lora_frozen_float32=True),
        check("meta-llama/Llama-3.2-1B", 8, 512, "v6e-1", checkpointing=True),
        check("google/gemma-2-2b", 2, 512, "v6e-4", "fsdp"),
        check("Qwen/Qwen2.5-0.5B", 4, 2048, "v6e-1"),
    )


# Fitted: the default model, two batch sizes, both layouts, bf16 and float32, LoRA once, at 128 tokens on v5e (the
# activation coefficients), and two encoders at 512 tokens (the attention scores' growth with the length: SCORE_BYTES;
# DistilBERT's row was a check row until its miss made it the second fit).
FITS = (*(Row(batch, layout, precision) for layout in ("data", "fsdp") for precision in ("bf16", "no")
          for batch in (16, 32)), Row(16, "data", "bf16", lora_r=8, lora_frozen_float32=True))
LENGTH_FITS = (Row(8, "data", "bf16", model="bert-base-cased", length=512),
               Row(16, "data", "bf16", model="distilbert-base-uncased", length=512, tpu="v5p-8"))
ROWS = tuple(row for row in (*FITS, *LENGTH_FITS, *_checks())
             if row.task == task.NAME and (row.model == DEFAULT_MODEL or row.role == "check" or row in LENGTH_FITS))
# make test runs the quick profile: one narrowed row (the tests compile both layouts).
QUICK_ROWS = (Row(8, "fsdp", "bf16"),)


def model_folder(folder, narrowed: bool, model: str = DEFAULT_MODEL):
    """A folder with the model's config.json alone, at its real size or narrowed."""
    import transformers

    name, shape = REAL_SHAPES[model]
    getattr(transformers, name)(**{**shape, **(NARROWED if narrowed else {})}).save_pretrained(folder)
    return folder


def plan_argv(row: Row, folder, length: int) -> list[str]:
    # Every flag the estimate reads, whatever the bake's answers (its pure bf16 level, its labels): the same row in
    # any bake, so that a bake's test can recompute the committed estimate (tests/test_plan.py).
    argv = ["--model_name_or_path", str(folder), "--tpu", row.target, "--parallelism", row.layout,
            "--mixed_precision", row.precision, "--pure_bf16", "no", "--train_batch_size", str(row.batch),
            "--max_seq_length", str(length)]
    if row.task == "text-classification":
        argv += ["--num_labels", "2"]
    if row.lora_r:
        argv += ["--lora_r", str(row.lora_r)] + (["--lora_frozen_float32", "true"] if row.lora_frozen_float32 else [])
    if row.checkpointing:
        argv += ["--gradient_checkpointing", "true"]
    return argv


def measure(row: Row, folder, report_path, max_seq_length: int | None = None) -> dict:
    """plan.py --compile for the row's slice; the estimate's and the compiler's peaks per device, and their ratio
    (None where the estimate has no figure, with its reason)."""
    run_command("plan.py", [*plan_argv(row, folder, max_seq_length or row.length), "--compile", "--report", str(report_path)],
                Path(f"{report_path}.log"))
    (target,) = json.loads(report_path.read_text())["targets"].values()
    compiled, estimated = target["compiler"], target["estimate"]
    gib = lambda value: None if value is None else value / 2 ** 30  # noqa: E731
    return {
        "row": asdict(row), "task": row.task, "target": row.target, "model_config": REAL_SHAPES[row.model],
        # plan.py's flags but the folder and the report: a test recomputes the estimate from them (tests/test_plan.py)
        "plan_flags": plan_argv(row, "MODEL", max_seq_length or row.length)[2:],
        "estimate_peak_gib": gib(estimated["peak_bytes"]),
        "estimate_why": estimated.get("why"), "compiler_peak_gib": gib(compiled["peak_bytes"]),
        "estimate_over_compiler": compiled["estimate_over_compiler"],
        # The step's own verdict: the estimate is the step's (--compile's `fits` also holds the evaluation to the chip).
        "compiler_fits": compiled["step_fits"], "estimate_fits": target["fits"], "compile_seconds": compiled["compile_seconds"],
        "compiler_answer_cached": "cached" in compiled,
        "compiler_parts_gib": {name: value / 2 ** 30 for name, value in compiled["parts"].items()},
        "estimate_parts_gib": {name: gib(value) for name, value in estimated["parts"].items()},
    }


def keep(results_file: Path, name: str, result: dict, when: str, machine: str) -> None:
    """Add (or replace) a row's result in the matrix's results file (JSON)."""
    kept = json.loads(results_file.read_text()) if results_file.is_file() else {"rows": {}}
    kept["rows"][name] = {**result, "measured": when, "machine": machine}
    results_file.parent.mkdir(parents=True, exist_ok=True)
    results_file.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")

