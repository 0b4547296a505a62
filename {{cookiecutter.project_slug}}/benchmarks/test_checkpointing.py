"""What step checkpoints cost: the project's loop with a checkpoint after every epoch, and also every few steps; and
what the manifest's sha256 costs (seconds per GB on this machine, and its share of one save here).

Both runs in the same session, one after the other. The step time here is amortised: the epochs after the
first, compile time taken out, divided by their steps, so that the saves made inside an epoch count in it.
"""

import os
import time
from functools import partial
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.fault_tolerance.manifest import MANIFEST, sha256

from . import isolation
from .measure_recompilation import project_loop

# Realistic for a long run is every few hundred steps; the quick profile has 24 steps, so every 5.
SAVE_STEPS = 5


def amortised_step_seconds(result: dict, batch_size: int) -> float:
    return batch_size / result["steady_examples_per_second"]


def hashing(output_dir: Path, scratch: Path) -> dict:
    """The manifest's cost: sha256 over 256 MiB of random bytes (seconds per GB), and over the last checkpoint's files."""
    blob = scratch / "blob"
    blob.write_bytes(os.urandom(256 * 2**20))
    started = time.perf_counter()
    sha256(blob)
    per_gb = (time.perf_counter() - started) / (blob.stat().st_size / 1e9)
    blob.unlink()
    folder = max((path.parent for path in output_dir.rglob(MANIFEST)), key=lambda path: path.stat().st_mtime_ns)
    files = [path for path in folder.rglob("*") if path.is_file() and path.name != MANIFEST]
    started = time.perf_counter()
    for path in files:
        sha256(path)
    return {"sha256_s_per_gb": per_gb, "checkpoint_bytes": sum(path.stat().st_size for path in files),
            "hash_seconds_per_save": time.perf_counter() - started}


@pytest.mark.benchmark(group="checkpoints")
@pytest.mark.compares("bit for bit", "eval accuracy with step checkpoints against without (the same graphs)")
def test_step_checkpoint_cost(benchmark, profile, tmp_path):
    epochs_only = isolation.run(partial(project_loop, checkpoint=True), profile, str(tmp_path / "epochs"))
    steps = benchmark.pedantic(
        isolation.run, args=(partial(project_loop, checkpoint=True, save_steps=SAVE_STEPS), profile,
                             str(tmp_path / "steps")), rounds=1, iterations=1,
    )
    batch = steps["train_batch_size"]
    cost = hashing(tmp_path / "steps", tmp_path)
    with_saves, without = amortised_step_seconds(steps, batch), amortised_step_seconds(epochs_only, batch)
    benchmark.extra_info.update(
        headline="step_time_with_over_without", save_steps=SAVE_STEPS, device=steps["device"],
        checkpoints_written=steps["checkpoints_written"], checkpoints_written_epochs_only=epochs_only["checkpoints_written"],
        seconds_per_save=steps["checkpoint_seconds"] / steps["checkpoints_written"],
        step_s_with_step_saves=with_saves, step_s_epoch_saves_only=without, step_time_with_over_without=with_saves / without,
        compilations=steps["compilations"], compilations_epochs_only=epochs_only["compilations"], **cost,
        hash_share_of_save=cost["hash_seconds_per_save"] / (steps["checkpoint_seconds"] / steps["checkpoints_written"]),
    )
    assert steps["compilations"] == epochs_only["compilations"], "a checkpoint compiled a graph"
    assert steps["checkpoints_written"] > epochs_only["checkpoints_written"] == profile.compare_epochs
    assert steps["eval_accuracy"] == epochs_only["eval_accuracy"]
