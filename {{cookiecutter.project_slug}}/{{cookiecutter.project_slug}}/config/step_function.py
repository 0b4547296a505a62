"""--step_function: which step a run takes, and what the whole JAX step cannot do, decided here and nowhere else.

lazy traces every operation in Python every step (loop/step.py); jax traces the whole step once as one JAX function
(xla/jax_step.py) and replays it. auto, the default, is jax wherever it can run, else lazy with the reason said.
What the JAX step cannot do is one list, `whole_step_refusals`, asked three times: by TrainConfig's checks as it is made
(the settings alone), by the run once the device, the layout and the processes are known (`choose`,
loop/training.py), and by plan.py's --compile, which compiles the same function.
"""

import importlib.util
from dataclasses import dataclass

from .defaults import STEP_FUNCTIONS, ConfigError


@dataclass(frozen=True)
class Choice:
    """The step a run takes: `whole` for the JAX function, and why the lazy one where auto could not take it."""

    whole: bool
    why: str | None = None  # auto's reason for the lazy step (the first refusal); None when asked for or whole
    steps: int | None = 1  # --steps_per_execution: optimizer steps a call; None: auto measures it on the TPU (loop/calls.py)
    steps_why: str = "asked for"  # why that many

    @property
    def name(self) -> str:
        return "jax" if self.whole else "lazy"


@dataclass(frozen=True)
class Found:
    """What a run finds as it prepares, which its settings alone do not say."""

    on_xla: bool  # the accelerator's device is an XLA device (torch_xla)
    layout: str  # parallel/'s layout name: data or fsdp
    processes: int  # the run's processes
    device: str = "xla:CPU"  # xla/device.py's device_kind: xla:TPU, xla:CPU...
    level: str | None = None  # the precision level it trains at (precision/levels.py's requested_level)


def whole_step_refusals(config, found: Found | None = None) -> dict[str, str]:
    """Why the whole JAX step cannot run `config` (and, given `found`, this run): the setting or fact each reason is
    about, and the one line that says it, in the order they are said; empty when it can run.

    Whatever config.step_function says: plan.py compiles the JAX step for a lazy run too, and auto asks it.
    """
    refusals = {}
    if config.optim != "adamw" or config.kahan_summation:
        refusals["optim"] = "step_function='jax' runs the project's AdamW: leave optim=adamw and kahan_summation off"
    if (pure := _pure_bf16(config, found)) in ("xla", "downcast"):
        refusals["pure_bf16"] = (f"step_function='jax' with pure_bf16={pure!r}: XLA's bf16 variables do not "
                                 "reach a JAX function; use pure_bf16=cast or no")
    if found is None:
        return refusals
    if not found.on_xla:
        refusals["device"] = "step_function='jax' needs an XLA device (torch_xla): use step_function=lazy here"
    if found.layout == "data" and found.processes > 1:
        # Accelerate averages the lazy step's gradients between processes in its clip and optimizer step; inside
        # the JAX function nothing does. Under fsdp the SPMD partitioner adds the collectives to the one graph.
        refusals["processes"] = (f"step_function='jax' with parallelism='data' takes one process per host, driving "
                                 f"its chips over an SPMD mesh, not {found.processes} processes (one per chip): start "
                                 "train.py as one process (docs/chip-waiting.md), or use step_function=lazy")
    if problem := _jax_problem():
        refusals["jax"] = problem
    return refusals


def choose(config, found: Found) -> Choice:
    """The step this run takes: jax when asked for or when auto finds nothing refused, else lazy (auto says why).
    An explicit jax that cannot run is refused in one line (ConfigError)."""
    check(config)  # the value itself
    if config.step_function == "lazy":
        return Choice(False)
    refusals = whole_step_refusals(config, found)
    if refusals and config.step_function == "jax":
        raise ConfigError(next(iter(refusals.values())))
    if refusals:
        why = next(iter(refusals.values())).replace("step_function='jax'", "the JAX step")
        return with_steps(config, Choice(False, why), found)
    return with_steps(config, Choice(True), found)


def steps_asked(config) -> int | None:
    """--steps_per_execution as a number; None for auto. A value that is neither is refused in one line."""
    value = str(config.steps_per_execution).strip().lower()
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"steps_per_execution={config.steps_per_execution!r}: must be auto or a whole number of "
                          "at least 1")
    return int(value)


def check_steps(config) -> None:
    """An explicit K > 1 that cannot work, from the settings alone: the lazy step, batches of several shapes, or a
    checkpoint or evaluation interval K does not divide (they happen between calls: refused, never moved)."""
    asked = steps_asked(config)
    if asked is None or asked == 1:
        return
    if config.step_function == "lazy":
        raise ConfigError(f"steps_per_execution={asked}: several steps a call need the JAX step; step_function='lazy' "
                          "takes one step a call (leave steps_per_execution auto or 1, or use step_function=jax)")
    if (shapes := _shapes_vary(config)):
        raise ConfigError(f"steps_per_execution={asked}: {shapes}")
    if (refusals := whole_step_refusals(config)):
        raise ConfigError(f"steps_per_execution={asked}: several steps a call need the JAX step, and "
                          + next(iter(refusals.values())).replace("step_function='jax'", "it"))
    for name in ("save_steps", "eval_steps"):  # logging_steps is rounded up instead (rounded_logging_steps)
        every = getattr(config, name)
        if every and every % asked:
            raise ConfigError(f"steps_per_execution={asked}: {name}={every} is not a multiple of it (checkpoints and "
                              f"evaluations happen between calls): give {name} a multiple of {asked}, or "
                              f"steps_per_execution a divisor of {every}")


def rounded_logging_steps(logging_steps: int, steps: int | None) -> int:
    """--logging_steps up to the next multiple of the steps a call: logs fall between calls. Rounded, not refused like
    save_steps and eval_steps, since a log only reads: the run says so in a line."""
    if not steps or not logging_steps or logging_steps % steps == 0:
        return logging_steps
    return -(-logging_steps // steps) * steps


def with_steps(config, choice: Choice, found: Found) -> Choice:
    """The choice with its steps a call: an explicit K, or auto's (1 where several gain nothing, with the reason; None on
    a TPU: loop/calls.py measures it). An explicit K > 1 that cannot run here is refused in one line."""
    asked = steps_asked(config)
    if asked is not None:
        if asked > 1 and not choice.whole:
            raise ConfigError(f"steps_per_execution={asked}: several steps a call need the JAX step, and this run "
                              f"takes the lazy one ({choice.why})")
        return Choice(choice.whole, choice.why, asked, "asked for")
    if not choice.whole:
        return Choice(False, choice.why, 1, "auto: the lazy step traces every step, so one step a call")
    if (shapes := _shapes_vary(config)):
        return Choice(True, None, 1, f"auto: {shapes}")
    if found.device != "xla:TPU":
        return Choice(True, None, 1, f"auto: on {found.device} the device runs each call inside its sync, so the host's "
                                     "time is never hidden behind the device's: several steps a call gain nothing here")
    return Choice(True, None, None, "auto: measured on the first steps (loop/calls.py)")


def _shapes_vary(config) -> str | None:
    if config.padding not in ("fixed", "longest"):  # longest: every row padded to the data's longest, one shape
        return (f"padding={config.padding!r} gives batches of several shapes, and the steps of one call share one "
                "shape: use padding=fixed")
    return None


def check(config, found: Found | None = None) -> None:
    """Refuse a step function that is not one, or the JAX step asked for where it cannot run: the first reason, one line;
    then the steps a call (check_steps)."""
    if config.step_function not in STEP_FUNCTIONS:
        raise ConfigError(f"step_function={config.step_function!r}: must be one of {', '.join(STEP_FUNCTIONS)}")
    check_steps(config)
    if config.step_function == "jax" and (refusals := whole_step_refusals(config, found)):
        raise ConfigError(next(iter(refusals.values())))


def _pure_bf16(config, found: Found | None) -> str | None:
    """The pure_bf16 the run trains at: the level the run found (its flag, else the launcher's or the baked answer:
    precision/levels.py), else the flag alone (the settings as they are made, the plan)."""
    if found is None or found.level is None:
        return config.pure_bf16
    return found.level.removeprefix("pure-bf16-") if found.level.startswith("pure-bf16-") else "no"


def _jax_problem() -> str | None:
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("flax") is None:
        return ("step_function='jax' needs jax and flax, which the tpu and xla-cpu extras bring: "
                "pip install -e '.[tpu]' -c constraints.txt")
    return None
