"""The guide's memory claim, measured: N forked workers with the model shared, or built in each.

Host memory is the sum of Pss over the launching process and its workers at the
peak. `*_model_copies` is that peak, net of a launch without a model, in model-sized
units: about N when every worker builds its own, about 1 when the model is shared.
"""

import pytest

from . import profiles
from .measure_shared_model import measure

WORKERS = {"quick": (2, 4), "full": (2, 4, 8)}


def pytest_generate_tests(metafunc):
    if "workers" in metafunc.fixturenames:
        counts = WORKERS[profiles.choose(metafunc.config.getoption("--bench-profile")).name]
        metafunc.parametrize("workers", counts, ids=[f"{count}-workers" for count in counts])


@pytest.mark.benchmark(group="shared-model-memory")
def test_shared_model_memory(benchmark, profile, workers):
    info = benchmark.pedantic(measure, args=(workers, profile), rounds=1, iterations=1)
    benchmark.extra_info.update(info, headline="per_worker_over_shared_fork")
    for pattern in ("per_worker", "shared_fork", "shared_pickled"):
        assert info[f"{pattern}_processes"] == workers + 1, pattern  # the launcher and every worker were sampled
    assert info["model_bytes"] > 0
    # The weights travel as the launcher says: pickling puts about one copy in /dev/shm, a fork none.
    assert info["shared_pickled_shm_bytes"] >= 0.9 * info["model_bytes"]
    assert info["shared_fork_shm_bytes"] < 0.1 * info["model_bytes"]
    # The claim itself, in whole model copies (net of the launch without a model): N built, one shared by the fork.
    # Measured 2.11 and 4.17 copies for 2 and 4 workers, 1.09 and 1.10 shared (bert-base, 2026-12-05).
    assert round(info["per_worker_model_copies"]) == workers, info["per_worker_model_copies"]
    assert round(info["shared_fork_model_copies"]) == 1, info["shared_fork_model_copies"]
