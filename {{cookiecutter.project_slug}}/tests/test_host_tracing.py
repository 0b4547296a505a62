"""The report's host tracing (watch/host_tracing.py): which steps count, and what it says of a TPU's step."""

from {{ cookiecutter.project_slug }}.watch.host_tracing import HostTracing


def traced(*milliseconds) -> HostTracing:
    """A HostTracing that timed these steps (forward, backward, optimizer in ms each), without reading a clock."""
    tracing = HostTracing()
    for forward, backward, optimizer in milliseconds:
        phases = {"forward": forward / 1e3, "backward": backward / 1e3, "optimizer": optimizer / 1e3, "whole_step": 0.0}
        tracing.steps.append({**phases, "step": sum(phases.values()) + 0.001})
    return tracing


def test_the_first_steps_are_left_out_and_the_median_is_taken():
    tracing = traced((500, 500, 500), (400, 400, 400), (10, 20, 30), (12, 22, 32), (11, 21, 31))
    assert tracing.seconds_per_step() == {"step": 0.064, "forward": 0.011, "backward": 0.021, "optimizer": 0.031,
                                          "steady_steps": 3}
    assert traced((5, 6, 7)).seconds_per_step()["steady_steps"] == 1  # a one-step run: its only step


def test_the_phases_are_the_median_step_s_and_add_up_to_at_most_its_whole():
    # Steady steps of 22, 23, 24 and 31 ms: each phase's own median is 10 ms, 30 ms in all, more than the median
    # step's 23 ms; the phases given are that step's (the lower middle one of four).
    tracing = traced((0, 0, 0), (0, 0, 0), (1, 10, 10), (10, 2, 10), (10, 10, 3), (10, 10, 10))
    median = tracing.seconds_per_step()
    assert median == {"step": 0.023, "forward": 0.01, "backward": 0.002, "optimizer": 0.01, "steady_steps": 4}
    assert median["forward"] + median["backward"] + median["optimizer"] <= median["step"]


def test_a_tpu_step_mostly_traced_is_called_host_bound():
    tracing = traced(*[(30, 30, 30)] * 5)  # 91 ms traced
    waiting = tracing.host_share("xla:TPU", steady_step_seconds=0.1)
    assert waiting["share"] == 0.91 and waiting["says"].startswith("host-bound")
    assert "the JAX step" in waiting["says"] and "--train_batch_size" in waiting["says"]
    busy = tracing.host_share("xla:TPU", steady_step_seconds=0.5)
    assert busy["share"] == 0.182 and not busy["says"].startswith("host-bound")


def test_no_share_where_execution_does_not_overlap_tracing():
    tracing = traced(*[(30, 30, 30)] * 5)
    for kind, why in (("xla:CPU", "XLA:CPU runs each graph inside the sync"), ("cpu", "no XLA device")):
        share = tracing.host_share(kind, 0.1)
        assert share["share"] is None and share["says"].startswith(why)
    assert tracing.host_share("xla:TPU", None)["share"] is None  # no steady step timed
