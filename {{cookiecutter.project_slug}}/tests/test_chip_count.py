"""The demo learns at any chip count: its global batch (config.DEMO_GLOBAL_BATCH) is split over the chips.

At a fixed per-chip batch the demo's steps would shrink with the chips (8 chips at 16 each: 3 steps an epoch) and it
would end untrained on a v5e-8. Here it runs the same schedule on 8 XLA CPU devices (fsdp, in an fsdp project) and in
4 gloo processes (data, in a data project) as on one device, and reaches the bar the one-device demo reaches
(conftest.DEMO_BAR). A user's own data keep
the per-chip batch (--train_batch_size, default the bake's answer).
"""

import pytest
from conftest import TASK, demo_learned, spmd_env, train, train_in_workers

from {{ cookiecutter.project_slug }}.config import DEMO_GLOBAL_BATCH, TRAIN_BATCH_SIZE, TrainConfig

# The demo as users run it (baked epochs and learning rate), without what these tests do not look at. The classifier's
# texts fit in 32 tokens (a shorter row changes no example); the language model's blocks stay the baked length, since
# the block length decides how many training examples (blocks) there are.
DEMO = ["--checkpoint", "false", "--export", "false", "--max_recompilations", "0"]
if TASK != "causal-lm":
    DEMO += ["--max_seq_length", "32"]


def demo_steps(report) -> int:
    """The optimizer steps of the demo's schedule on one chip: its examples in global batches, every epoch."""
    return report["train_examples"] // DEMO_GLOBAL_BATCH * report["epochs"]


def test_the_per_chip_batch_is_the_demo_s_global_one_split_or_as_given():
    config = TrainConfig()
    assert [config.per_chip_train_batch(True, chips) for chips in (1, 2, 4, 8, 16, 32)] == [16, 8, 4, 2, 1, 1]
    assert config.per_chip_train_batch(True, 3) == 5  # said in one line by the run: 15 in all
    assert config.per_chip_train_batch(False, 8) == TRAIN_BATCH_SIZE  # a user's data: per chip, as baked
    assert TrainConfig(train_batch_size=4).per_chip_train_batch(True, 8) == 4  # given: per chip, demo or not


@pytest.mark.xla
@pytest.mark.layout("fsdp")
@pytest.mark.slow
def test_the_demo_learns_on_eight_fsdp_devices(tmp_path):
    # No --parallelism: an fsdp project's runs take its baked layout (the answer reaches train.py).
    report, _ = train(tmp_path, *DEMO, env=spmd_env(8, long=True))
    assert report["layout"]["parallelism"] == "fsdp" and report["layout"]["mesh"] == {"fsdp": 8}
    assert report["train_batch"] == {"per_chip": DEMO_GLOBAL_BATCH // 8, "accumulation_steps": 1,
                                     "global": DEMO_GLOBAL_BATCH}
    assert report["learning_rate"]["optimizer_steps"] == demo_steps(report)
    assert report["recompilations"] == 0 and report["xla_compilations"] == 2
    assert demo_learned(report), report


# Four processes, as a v5e-4 or a v4-8 runs them (the forked workers wait for each other before the rendezvous:
# conftest.WORKERS says why).
@pytest.mark.workers
@pytest.mark.layout("data")
@pytest.mark.slow
def test_the_demo_learns_in_four_data_parallel_processes(tmp_path):
    report, _, rates = train_in_workers(tmp_path, 4, *DEMO)
    assert report["num_processes"] == 4 and len(rates) == 4
    assert report["train_batch"] == {"per_chip": DEMO_GLOBAL_BATCH // 4, "accumulation_steps": 1,
                                     "global": DEMO_GLOBAL_BATCH}
    assert report["learning_rate"]["optimizer_steps"] == demo_steps(report)
    assert all(len(process) == demo_steps(report) for process in rates.values())
    assert demo_learned(report), report
