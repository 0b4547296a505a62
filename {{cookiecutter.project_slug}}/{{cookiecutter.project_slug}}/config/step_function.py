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

    @property
    def name(self) -> str:
        return "jax" if self.whole else "lazy"


@dataclass(frozen=True)
class Found:
    """What a run finds as it prepares, which its settings alone do not say."""

    on_xla: bool  # the accelerator's device is an XLA device (torch_xla)
    layout: str  # parallel/'s layout name: data or fsdp
    processes: int  # the run's processes
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
    return Choice(False, next(iter(refusals.values())).replace("step_function='jax'", "the JAX step")) if refusals else Choice(True)


def check(config, found: Found | None = None) -> None:
    """Refuse a step function that is not one, or the JAX step asked for where it cannot run: the first reason, one line."""
    if config.step_function not in STEP_FUNCTIONS:
        raise ConfigError(f"step_function={config.step_function!r}: must be one of {', '.join(STEP_FUNCTIONS)}")
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
