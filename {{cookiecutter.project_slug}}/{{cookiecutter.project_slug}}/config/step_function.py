"""--step_function: which step a run takes, and what the whole JAX step cannot do, decided here and nowhere else.

lazy traces every operation in Python every step (loop/step.py); jax traces the whole step once as one JAX function
(xla/jax_step.py) and replays it. What the JAX step cannot do is one list, `whole_step_refusals`, asked three times:
by TrainConfig's checks as it is made (the settings alone), by the run's preparation once the device, the layout and
the processes are known (loop/preparation.py), and by plan.py's --compile, which compiles the same function.
"""

import importlib.util
from dataclasses import dataclass

from .defaults import STEP_FUNCTIONS, ConfigError


def takes_whole_step(config) -> bool:
    """True when the run's step is the whole JAX function (--step_function jax), False for the lazy step."""
    return config.step_function == "jax"


@dataclass(frozen=True)
class Found:
    """What a run finds as it prepares, which its settings alone do not say."""

    on_xla: bool  # the accelerator's device is an XLA device (torch_xla)
    layout: str  # parallel/'s layout name: data or fsdp
    processes: int  # the run's processes
    hosts: int  # the hosts the layout spans


def whole_step_refusals(config, found: Found | None = None) -> dict[str, str]:
    """Why the whole JAX step cannot run `config` (and, given `found`, this run): the setting or fact each reason is
    about, and the one line that says it, in the order they are said; empty when it can run.

    Whatever config.step_function says: plan.py compiles the JAX step for a lazy run too.
    """
    refusals = {}
    if config.optim != "adamw" or config.kahan_summation:
        refusals["optim"] = "step_function='jax' runs the project's AdamW: leave optim=adamw and kahan_summation off"
    if config.gradient_accumulation_steps != 1:
        refusals["gradient_accumulation_steps"] = "step_function='jax' is one graph per step: set gradient_accumulation_steps=1"
    if config.pure_bf16 not in (None, "no", "cast"):
        refusals["pure_bf16"] = (f"step_function='jax' with pure_bf16={config.pure_bf16!r}: XLA's bf16 variables do not "
                                 "reach a JAX function; use pure_bf16=cast or no")
    if config.gradient_checkpointing:
        refusals["gradient_checkpointing"] = "step_function='jax' does not recompute activations: leave gradient_checkpointing off"
    if found is None:
        return refusals
    if not found.on_xla:
        refusals["device"] = "step_function='jax' needs an XLA device (torch_xla): use step_function=lazy here"
    if found.layout == "data" and found.processes > 1:
        # Accelerate averages the lazy step's gradients between processes in its clip and optimizer step; inside
        # the JAX function nothing does. Under fsdp the SPMD partitioner adds the collectives to the one graph.
        refusals["processes"] = ("step_function='jax' with parallelism='data' runs in one process only (its gradients "
                                 "are not averaged between processes): use parallelism=fsdp (SPMD) or step_function=lazy")
    if found.hosts > 1:  # torchax breaks torch.distributed's barrier (xla/runtime.py)
        refusals["hosts"] = "step_function='jax' runs on one host for now: use step_function=lazy on several hosts"
    if importlib.util.find_spec("jax") is None or importlib.util.find_spec("flax") is None:
        refusals["jax"] = ("step_function='jax' needs jax and flax, which the tpu and xla-cpu extras bring: "
                           "pip install -e '.[tpu]' -c constraints.txt")
    return refusals


def check(config, found: Found | None = None) -> None:
    """Refuse a step function that is not one, or the JAX step where it cannot run: the first reason, in one line."""
    if config.step_function not in STEP_FUNCTIONS:
        raise ConfigError(f"step_function={config.step_function!r}: must be one of {', '.join(STEP_FUNCTIONS)}")
    if takes_whole_step(config) and (refusals := whole_step_refusals(config, found)):
        raise ConfigError(next(iter(refusals.values())))
