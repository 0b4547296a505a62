"""A benchmark row in TPU terms: plan.py --rehearse for the row's model and flags (the run staged on XLA:CPU, each of
its graphs compiled by libtpu for a 4-chip v5e and v6e slice, without a TPU). The figures are the TPU compiler's, per chip:
peak HBM, bytes accessed, FLOPs, compile seconds, and a hash of the program it made. Needs the plan extra (libtpu);
`tpu_problem` says why not where it is missing.

Each rehearsal is one plan.py run, forked (project_runs.run_command), reading a folder that holds only the row's
config.json: no weight is read.
"""

import importlib.util
import json
import os
from pathlib import Path

from .profiles import BERT_VOCAB_SIZE, MODEL_SHAPES, Profile
from .project_runs import run_command

# 4-chip slices: the slice the rehearsal's tests check against real runs (tests/test_rehearsal.py, 4 SPMD devices).
TARGETS = ("v5e-4", "v6e-4")
# One chip each: an eval-batching row's eval batch size is per process on one device, as a run's is per chip.
ONE_CHIP = ("v5e-1", "v6e-1")
# The precision levels' flags (precision/levels.py's requested_level reads them back).
LEVEL_FLAGS = {
    "fp32": ("no", "no"), "bf16": ("bf16", "no"), "pure-bf16-xla": ("bf16", "xla"),
    "pure-bf16-downcast": ("bf16", "downcast"), "pure-bf16-cast": ("bf16", "cast"),
}
FIGURES = ("kind", "batch_shapes", "peak_bytes", "bytes_accessed", "flops", "compile_seconds", "program_sha256")


def not_rehearsed(profile: Profile) -> str | None:
    """Why a row gets no TPU part, or None: not asked for (the quick profile rehearses only where BENCH_TPU=1 asks,
    about a minute a row on two cores), or the plan extra missing."""
    if not (profile.tpu_compiler or os.environ.get("BENCH_TPU") == "1"):
        return "the full profile or BENCH_TPU=1 rehearses it"
    return tpu_problem()


def tpu_problem() -> str | None:
    missing = [name for name in ("jax", "libtpu", "torchax") if importlib.util.find_spec(name) is None]
    return f"{', '.join(missing)} not installed (the plan extra)" if missing else None


def model_folder(model_name: str, folder: Path, vocab_size: int, config) -> Path:
    """The row's model as a config.json alone: the demo's tiny BERT, or a BERT shape of the profile."""
    from transformers import BertConfig

    from . import workload

    if not (folder / "config.json").is_file():
        if model_name == "demo":
            workload.build("demo", config, vocab_size).config.save_pretrained(folder)
        else:
            BertConfig(vocab_size=max(BERT_VOCAB_SIZE, vocab_size), num_labels=config.num_labels,
                       **MODEL_SHAPES[model_name]).save_pretrained(folder)
    return folder


def rehearse(folder: Path, argv: list[str], report: Path, cache: Path, targets: tuple = TARGETS) -> dict:
    """{target: {"graphs": [each graph's figures], "fits": ...}, "step_function": ...} of one rehearsal."""
    run_command("plan.py", ["--model_name_or_path", str(folder), "--tpu", ",".join(targets), "--rehearse",
                            "--compile_cache", str(cache), "--report", str(report), *argv], Path(f"{report}.log"))
    planned = json.loads(report.read_text())["targets"]
    return {name: {"fits": target["rehearsal"]["fits"],
                   "graphs_after_the_first_epoch": target["rehearsal"]["graphs_after_the_first_epoch"],
                   "graphs": [{key: graph[key] for key in FIGURES} for graph in target["rehearsal"]["graphs"]]}
            for name, target in planned.items()}


def precision_part(level: str, model_name: str, profile: Profile, scratch: Path) -> dict:
    """The TPU compiler's view of the level's steady training step (the project's lazy step, the one every level
    takes): its figures per target, and the same for each graph the run compiles."""
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer

    from . import workload

    config = workload.config_for(profile)
    vocab_size = len(load_tokenizer(config.data, config.model, demo=True))
    mixed, pure = LEVEL_FLAGS[level]
    folder = model_folder(model_name, scratch / f"model-{model_name}", vocab_size, config)
    part = rehearse(folder, ["--mixed_precision", mixed, "--pure_bf16", pure, "--step_function", "lazy",
                             "--max_seq_length", str(profile.max_seq_length), "--train_batch_size",
                             str(profile.batch_size)], scratch / f"rehearsal-{model_name}-{level}.json", scratch / "cache")
    for target in part.values():
        steps = [graph for graph in target["graphs"] if graph["kind"] == "training step"]
        target["step"] = steps[-1]  # the steady step: the last training graph the run compiles
    return part


def eval_part(cell, profile: Profile, scratch: Path) -> dict:
    """The TPU compiler's view of an eval-batching row (benchmarks/grid.py's Cell): the project's run with the cell's
    eval batch size and padding over the demo's eval file, rehearsed for one v5e and one v6e chip; per target the
    evaluation graphs it compiles, each with its compile seconds and peak, and their sum. The run pads its last eval
    batch: a row that drops it or keeps it ragged is the benchmark's own loader, not a run's, and gets none."""
    from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer

    from . import workload

    if cell.last_batch != "pad":
        return {"why_none": f"last batch {cell.last_batch}: the project's run always pads its last eval batch"}
    config = workload.config_for(profile, eval_batch_size=cell.eval_batch_size, padding=cell.padding)
    folder = model_folder("demo", scratch / "model-demo", len(load_tokenizer(config.data, config.model, demo=True)), config)
    part = rehearse(folder, ["--mixed_precision", "no", "--step_function", "lazy", "--eval_file", str(DEMO_FILES["eval"]),
                             "--eval_batch_size", str(cell.eval_batch_size), "--padding", cell.padding,
                             "--max_seq_length", str(profile.max_seq_length),
                             "--train_batch_size", str(config.per_chip_train_batch(True, 1))],
                    scratch / f"rehearsal-{cell.id}.json", scratch / "cache", ONE_CHIP)
    for target in part.values():
        target["eval_graphs"] = [graph for graph in target["graphs"] if graph["kind"] == "evaluation"]
        target["eval_compile_seconds"] = round(sum(graph["compile_seconds"] for graph in target["eval_graphs"]), 1)
    return part


def step_summary(part: dict, target: str = TARGETS[0]) -> str:
    """'12.3 MiB, program 1a2b3c4d': the steady step on `target` (per chip), for the table's one column; n/a where the
    rehearsal cut graphs again in its second epoch (a real run would recompile there, or the rehearsal is not faithful
    to the recipe: the plan warns either way)."""
    if part[target]["graphs_after_the_first_epoch"]:
        return f"n/a: {part[target]['graphs_after_the_first_epoch']} graph(s) again in epoch 2"
    step = part[target]["step"]
    return f"{step['peak_bytes'] / 2 ** 20:.1f} MiB, program {step['program_sha256'][:8]}"
