"""How long the host spends tracing each training step: the time a TPU can never beat.

torch_xla records a step lazily: every torch call of the forward, backward and optimizer runs in Python and adds to a
graph, which is handed to the runtime at the step's sync. A TPU executes that graph while the host traces the next
step, so a steady step takes at least its tracing. At the default models' real layer counts the plain lazy loop traced
21-32 times longer than a v5e computes the step (docs/chip-waiting.md).

The loop marks a step's phases (loop/step.py) up to the hand-over (training.py, just before the sync); the report gives
the median steady step (the first ones left out: Python's first calls there import and build caches), whole and by
phase. The time spent inside an accumulated step's own syncs is left out: that is the device's, not tracing.
"""

import time

PHASES = ("forward", "backward", "optimizer", "whole_step")  # whole_step: the JAX step, one call for all three
FIRST_STEPS_LEFT_OUT = 2
HOST_BOUND_SHARE = 0.8  # at this share of the step or more the chip waits on the host


class HostTracing:
    def __init__(self):
        self.steps: list[dict] = []
        self._current: dict | None = None
        self._clock = 0.0

    def begin(self) -> None:
        """The step's first operation."""
        self._current = dict.fromkeys(PHASES, 0.0)
        self._clock = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last mark was spent on `phase`."""
        now = time.perf_counter()
        self._current[phase] += now - self._clock
        self._clock = now

    def resume(self) -> None:
        """Restart the clock without counting the time since the last mark (a sync inside the step)."""
        self._clock = time.perf_counter()

    def handed_over(self, steps: int = 1) -> None:
        """The graph is complete and about to be cut: the loop's own bookkeeping since the last mark counts too. A
        call of several optimizer steps (--steps_per_execution) counts its time per step, shared by its `steps`."""
        if self._current is None:
            return
        self._current["step"] = sum(self._current.values()) + time.perf_counter() - self._clock
        self.steps.append({phase: seconds / steps for phase, seconds in self._current.items()})
        self._current = None

    def seconds_per_step(self) -> dict | None:
        """The median steady step's seconds (the lower middle one of an even count): the whole hand-over and each
        phase (phases it never marked left out). The phases are that one step's, so they add up to at most its whole:
        medians taken phase by phase need not (on a loaded machine their sum passed the median step's whole)."""
        steady = self.steps[FIRST_STEPS_LEFT_OUT:] or self.steps[-1:]
        if not steady:
            return None
        median = sorted(steady, key=lambda step: step["step"])[(len(steady) - 1) // 2]
        return {**{phase: round(median[phase], 6) for phase in ("step", *PHASES) if median[phase] > 0},
                "steady_steps": len(steady)}

    def host_share(self, kind: str, steady_step_seconds: float | None) -> dict:
        """On a TPU (`kind` xla:TPU), tracing's share of the steady step and whether the chip waits; elsewhere why
        there is none."""
        traced = self.seconds_per_step()
        if kind != "xla:TPU":
            why = ("XLA:CPU runs each graph inside the sync, so tracing and execution never overlap here: the share "
                   "means something only on a TPU, where the chip computes one step while the host traces the next"
                   if kind.startswith("xla:") else
                   "no XLA device: torch runs each operation as it is called, so these seconds are execution, not tracing")
            return {"share": None, "says": why}
        if traced is None or not steady_step_seconds:
            return {"share": None, "says": "no steady steps timed (the run was too short, or --watch_compilations off)"}
        share = min(traced["step"] / steady_step_seconds, 1.0)
        says = (f"host-bound: tracing takes {traced['step'] * 1e3:.1f} ms of every {steady_step_seconds * 1e3:.1f} ms "
                "step, so the chip waits; the JAX step traces it once (the default where it can run: step_function_why says why not), or a larger per-chip batch "
                "(--train_batch_size): the host's time stays the same while the chip's grows"
                if share >= HOST_BOUND_SHARE else "the chip is busy for most of the step: tracing hides behind it")
        return {"share": round(share, 3), "says": says}
