"""What step checkpoints cost: the project's loop with a checkpoint after every epoch, and also every few steps.

Both runs in the same session, one after the other. The step time here is amortised: the epochs after the
first, compile time taken out, divided by their steps, so that the saves made inside an epoch count in it.
"""

from functools import partial

import pytest

from . import isolation
from .measure_recompilation import project_loop

# Realistic for a long run is every few hundred steps; the quick profile has 24 steps, so every 5.
SAVE_STEPS = 5


def amortised_step_seconds(result: dict, batch_size: int) -> float:
    return batch_size / result["steady_examples_per_second"]


@pytest.mark.benchmark(group="checkpoints")
def test_step_checkpoint_cost(benchmark, profile, tmp_path):
    epochs_only = isolation.run(partial(project_loop, checkpoint=True), profile, str(tmp_path / "epochs"))
    steps = benchmark.pedantic(
        isolation.run, args=(partial(project_loop, checkpoint=True, save_steps=SAVE_STEPS), profile,
                             str(tmp_path / "steps")), rounds=1, iterations=1,
    )
    batch = steps["train_batch_size"]
    with_saves, without = amortised_step_seconds(steps, batch), amortised_step_seconds(epochs_only, batch)
    benchmark.extra_info.update(
        headline="step_time_with_over_without", save_steps=SAVE_STEPS, device=steps["device"],
        checkpoints_written=steps["checkpoints_written"], checkpoints_written_epochs_only=epochs_only["checkpoints_written"],
        seconds_per_save=steps["checkpoint_seconds"] / steps["checkpoints_written"],
        step_s_with_step_saves=with_saves, step_s_epoch_saves_only=without, step_time_with_over_without=with_saves / without,
        compilations=steps["compilations"], compilations_epochs_only=epochs_only["compilations"],
    )
    assert steps["compilations"] == epochs_only["compilations"], "a checkpoint compiled a graph"
    assert steps["checkpoints_written"] > epochs_only["checkpoints_written"] == profile.compare_epochs
    assert steps["eval_accuracy"] == epochs_only["eval_accuracy"]
