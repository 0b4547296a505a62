"""What plan.py --rehearse (or --compile) found for a recipe on a slice, kept for the run itself: a run on that slice
with the same recipe reads it at its start, says so, and stops on the TPU compiler's peak instead of the estimate's.

A rehearsal is the run's own graphs, so it is read first. --compile's answer is the JAX step lowered on its own:
kept only for the data layout, where it agrees with the rehearsal (docs/plan.md); under fsdp it overstated the run's
peak about twice, which would stop runs that fit.

The same recipe: the same parameters (names, shapes, which train: the architecture, LoRA's adapters), the estimate's
Recipe (per-chip batch, length, precision level, layout, optimizer, Kahan, gradient checkpointing, task), and the
flags that change a graph but not the Recipe (step function, eval batch size, accumulation, padding). The same slice:
the chip generation and the chips the run's step spans. The record is JSON, read back as data only.
"""

import datetime
import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path


def default_cache() -> Path:
    """Where plan.py keeps the TPU compiler's answers unless --compile_cache says: XDG_CACHE_HOME or ~/.cache."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "{{ cookiecutter.project_slug }}-plans"


def recipe_key(model, recipe, config) -> str:
    """A hash of what decides the run's graphs (the module's docstring), the same in plan.py and in the run."""
    parameters = [[name, list(parameter.shape), parameter.requires_grad] for name, parameter in model.named_parameters()]
    flags = {name: getattr(config, name) for name in ("step_function", "gradient_accumulation_steps", "padding")}
    flags["eval_batch_size"] = config.per_chip_eval_batch(recipe.per_chip_batch)  # as resolved: given or defaulted alike
    text = json.dumps({"parameters": parameters, "recipe": asdict(recipe), "flags": flags}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path(cache: Path, key: str, generation: str, chips: int, source: str = "rehearse") -> Path:
    return Path(cache) / "rehearsals" / f"{key}-{generation}-{chips}{'' if source == 'rehearse' else '-' + source}.json"


def record(cache: Path, key: str, target, rehearsal: dict) -> Path:
    """Keep a target's rehearsal (plan_rehearsal.summary's figures, not its graphs) for runs of the same recipe."""
    return _write(_path(cache, key, target.chip.generation, target.chips), {
        "target": target.name, "generation": target.chip.generation, "chips": target.chips, "source": "rehearse",
        "rehearsed_on": datetime.date.today().isoformat(),
        **{name: rehearsal[name] for name in ("largest_peak_bytes", "largest", "fits",
                                             "compile_seconds_before_first_step", "compile_seconds_whole_run",
                                             "graphs_after_the_first_epoch")},
        "graphs": len(rehearsal["graphs"])})


def record_compiled(cache: Path, key: str, target, compiled: dict) -> Path:
    """Keep a target's --compile answer (the data layout's JAX step and its evaluation) for runs of the same recipe:
    the larger peak of the two, and whether both fit."""
    peaks = {"the JAX training step": int(compiled["peak_bytes"]),
             "the JAX evaluation": int(compiled["evaluation"]["peak_bytes"])}
    largest = max(peaks, key=peaks.get)
    return _write(_path(cache, key, target.chip.generation, target.chips, "compile"), {
        "target": target.name, "generation": target.chip.generation, "chips": target.chips, "source": "compile",
        "rehearsed_on": datetime.date.today().isoformat(), "largest_peak_bytes": peaks[largest],
        "largest": largest, "fits": compiled["fits"]})


def _write(path: Path, kept: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(kept, indent=1) + "\n")
    temporary.replace(path)  # whole or absent: a run never reads half a record
    return path


def lookup(cache: Path, key: str, generation: str | None, chips: int) -> dict | None:
    """The kept rehearsal of this recipe on `chips` chips of `generation`, else its kept --compile answer, or None
    (none kept, or unreadable)."""
    if generation is None:
        return None
    for source in ("rehearse", "compile"):
        try:
            kept = json.loads(_path(cache, key, generation, chips, source).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(kept, dict) and isinstance(kept.get("largest_peak_bytes"), int):
            return {"source": source, **kept}
    return None
