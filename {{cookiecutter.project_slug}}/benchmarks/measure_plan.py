"""Plan against the TPU compiler: plan.py's estimate of a step's peak memory per chip beside the TPU compiler's own
(plan.py --compile: libtpu compiles the step for the slice here, without a TPU).

Each row is one plan.py run in a fresh process (forked: project_runs.run_command), reading a folder that holds only a config.json: the bake's default
model at its real size (`--bench-profile plan`: minutes a row, single-threaded, 6-13 GB of host memory), or a narrowed
one (the quick profile: one layer 64 wide, seconds). The data layout's rows compile one chip's program (v5e-1: each
chip holds the whole model), fsdp's rows four chips' (v5e-4: weights, gradients and moments split four ways).
"""

import json
from dataclasses import dataclass
from pathlib import Path

from {{ cookiecutter.project_slug }}.config import DEFAULT_MODEL

from .project_runs import run_command

# The default models' real shapes, as their config.json on the hub gives them (nothing is downloaded).
REAL_SHAPES = {
    "bert-base-cased": ("BertConfig", {"vocab_size": 28996}),
    "Qwen/Qwen2.5-0.5B": ("Qwen2Config", {
        "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
        "tie_word_embeddings": True, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}),
}
NARROWED = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
            "max_position_embeddings": 128}
TARGETS = {"data": "v5e-1", "fsdp": "v5e-4"}


@dataclass(frozen=True)
class Row:
    batch: int
    layout: str
    precision: str  # --mixed_precision: bf16 (autocast, float32 weights) or no
    lora_r: int | None = None

    @property
    def name(self) -> str:
        lora = f"-lora{self.lora_r}" if self.lora_r else ""
        return f"{self.layout}-{self.precision}-{self.batch}x128{lora}"


# Two batch sizes, both layouts, bf16 and float32, LoRA once.
ROWS = (*(Row(batch, layout, precision) for layout in ("data", "fsdp") for precision in ("bf16", "no")
          for batch in (16, 32)), Row(16, "data", "bf16", lora_r=8))
# make test runs the quick profile: one narrowed row (the tests compile both layouts).
QUICK_ROWS = (Row(8, "fsdp", "bf16"),)


def model_folder(folder, narrowed: bool):
    """A folder with the default model's config.json alone, at its real size or narrowed."""
    import transformers

    name, shape = REAL_SHAPES[DEFAULT_MODEL]
    getattr(transformers, name)(**{**shape, **(NARROWED if narrowed else {})}).save_pretrained(folder)
    return folder


def measure(row: Row, folder, report_path, max_seq_length: int = 128) -> dict:
    """plan.py --compile for the row's slice; the estimate's and the compiler's peaks per chip, and their ratio."""
    argv = ["--model_name_or_path", str(folder), "--tpu", TARGETS[row.layout], "--parallelism", row.layout,
            "--mixed_precision", row.precision, "--train_batch_size", str(row.batch),
            "--max_seq_length", str(max_seq_length), "--compile", "--report", str(report_path)]
    if row.lora_r:
        argv += ["--lora_r", str(row.lora_r)]
    run_command("plan.py", argv, Path(f"{report_path}.log"))
    (target,) = json.loads(report_path.read_text())["targets"].values()
    compiled, estimated = target["compiler"], target["estimate"]
    return {
        "target": TARGETS[row.layout], "estimate_peak_gib": estimated["peak_bytes"] / 2 ** 30,
        "compiler_peak_gib": compiled["peak_bytes"] / 2 ** 30, "estimate_over_compiler": compiled.get(
            "estimate_over_compiler", estimated["peak_bytes"] / compiled["peak_bytes"]),
        "compiler_fits": compiled["fits"], "estimate_fits": target["fits"], "compile_seconds": compiled["compile_seconds"],
        "compiler_answer_cached": "cached" in compiled,
        "compiler_parts_gib": {name: value / 2 ** 30 for name, value in compiled["parts"].items()},
        "estimate_parts_gib": {name: value / 2 ** 30 for name, value in estimated["parts"].items()},
    }
