"""--steps_per_execution: how the loop groups an epoch's optimizer steps into calls of the JAX step.

A call holds at most K steps (xla/several_steps.py runs them as one scan). Logs, checkpoints and evaluations happen
between calls, so a call also ends at a step where one is due (their intervals are multiples of K: config/step_function.py
refuses others), at the epoch's end and at the run's last step; such a call has fewer real steps, and the rest are
masked in the same graph. Where calls start therefore depends only on the epoch's start and those due steps: a run
resumed from a checkpoint (written between calls) groups its steps as the uninterrupted run did.

auto on a TPU: the first PROBE_CALLS calls take one step each; the host's median time per call over those after the
first (which compiles) against the chip's time per step gives the smallest K, among the divisors of the due steps'
intervals, whose calls leave the host under HOST_SHARE of the chip's time. The chip's time is the step's model FLOPs
at ASSUMED_MFU of the chip's peak (the plan's figures: planning/targets.py); the line the run prints says both.
"""

import math
import statistics

PROBE_CALLS = 4
HOST_SHARE = 0.5
ASSUMED_MFU = 0.5
LARGEST = 64  # auto's largest K where nothing is due between calls (each call's batches stay on the device)


class Calls:
    """The run's steps a call (`steps`, and `why`), and the grouping of an epoch's batches into calls."""

    def __init__(self, choice, periods: list, say, chip_seconds=lambda: None):
        """`choice`: config/step_function.py's Choice; `periods`: the log, checkpoint and evaluation intervals (None or
        0: none); `chip_seconds()`: the chip's seconds a step, or None where the chip is not known."""
        self.steps, self.why = choice.steps or 1, choice.steps_why
        self.chip_seconds = chip_seconds
        self.measuring = choice.steps is None  # auto on a TPU: decided after PROBE_CALLS calls
        self.periods = [period for period in periods if period]
        self.say = say
        self.calls = self.masked = 0  # calls made, and the steps masked in them (short calls: due steps, ends)

    def due(self, global_step: int) -> bool:
        return any(global_step % period == 0 for period in self.periods)

    def groups(self, batches, first_step: int, steps: int, total: int):
        """The epoch's batches (a resumed epoch's remaining ones) in calls: lists of at most `self.steps` batches,
        `steps` in all (the epoch's, or fewer at --max_steps), the first after global step `first_step`. Stops
        pulling batches after the last one only when the loader has more (`total`): a loader left before its end
        skips its last sync, which moves XLA's random seed (fit.py)."""
        group = []
        for index, batch in enumerate(batches, start=1):
            group.append(batch)
            if len(group) >= self.steps or index == steps or self.due(first_step + index):
                self.calls += 1
                self.masked += self.steps - len(group)
                yield group
                group = []
            if index == steps < total:
                return

    def after_call(self, run) -> None:
        """auto on a TPU: once the probe calls are timed, choose K."""
        if not self.measuring or len(run.tracing.steps) < PROBE_CALLS:
            return
        self.measuring = False
        host = statistics.median(step["step"] for step in run.tracing.steps[1:PROBE_CALLS])
        chip = self.chip_seconds()
        if chip is None:
            self.why = "auto: the chip's generation is not known (TPU_ACCELERATOR_TYPE), so one step a call"
        else:
            self.steps, self.why = choose(host, chip, self.periods)
        self.say(f"steps_per_execution: {self.steps} ({self.why})")

    def report(self) -> dict:
        """The steps a call, why, and the calls made: a short one's remaining steps masked in the same graph."""
        return {"steps_per_execution": self.steps, "steps_per_execution_why": self.why,
                "steps_per_execution_calls": {"calls": self.calls, "masked_steps": self.masked,
                                              "how": "each call's graph is the same: a short call's steps are masked"}}


def choose(host_seconds: float, chip_seconds: float, periods: list) -> tuple[int, str]:
    """(K, why): the smallest K among the allowed ones (the divisors of the due steps' intervals' greatest common
    divisor, else 1 to LARGEST) whose host time per call is under HOST_SHARE of K steps of the chip's time."""
    bound = math.gcd(*periods) if periods else None
    allowed = [k for k in range(1, (bound or LARGEST) + 1) if bound is None or bound % k == 0]
    enough = next((k for k in allowed if host_seconds <= HOST_SHARE * k * chip_seconds), allowed[-1])
    share = host_seconds / (enough * chip_seconds)
    measured = (f"the host's {host_seconds * 1e3:.1f} ms a call against the chip's {chip_seconds * 1e3:.2f} ms a step "
                f"at {ASSUMED_MFU:.0%} MFU")
    if share <= HOST_SHARE:
        return enough, f"auto: {measured}, so {share:.2f} of {enough} steps' time"
    return enough, (f"auto: {measured}; the largest K the log, checkpoint and evaluation intervals allow leaves the "
                    f"host {share:.2f} of the chip's time: give --logging_steps a multiple of a larger K")


def chip_seconds_per_step(context, parts) -> float | None:
    """The chip's seconds for one optimizer step at ASSUMED_MFU of its bf16 peak: the model FLOPs of a chip's tokens
    (watch/flops.py's formula); None where the chip's generation is not known."""
    from ..watch import flops

    generation = flops.chip_generation()
    if generation is None:
        return None
    length = context.config.max_seq_length
    tokens = parts.train_batch_size * parts.accumulation * length
    per_token = flops.model_flops_per_token(context.layout.plain_model(context.accelerator), length)
    return per_token * tokens / (flops.PEAK_BF16_FLOPS[generation] * ASSUMED_MFU)
