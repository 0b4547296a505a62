"""A resume with settings a user may change on purpose: each change is applied, and one line says what the run now does.

Loaded as saved, the scheduler would keep the checkpoint's peak learning rate and its count of steps (torch's
LambdaLR restores `base_lrs` and `last_epoch` from its state), so a new --learning_rate would be ignored without a
word, and a new batch size would leave the schedule at a step that no longer means the same point of the run. So the
run's position is counted in examples, and the schedule (rebuilt from this run's options) is put at that position.
"""

from .resume import REFUSED

# The run's position is kept in examples: a step of another size continues after the same examples.
STEP_SIZE = ("train_batch_size", "gradient_accumulation_steps", "examples_per_step")
SCHEDULE = ("learning_rate", "num_epochs", "max_steps", "lr_scheduler_type", "warmup_ratio", "warmup_steps")
# Recorded facts that follow from the options (their change is said through the options').
DERIVED = ("examples_per_step", "optimizer_steps", "steps_per_epoch")


def changed_settings(recorded: dict, now: dict) -> dict:
    return {name: (old, now.get(name)) for name, old in recorded.items()
            if name not in REFUSED and name in now and old != now.get(name)}


def apply_changes(recorded: dict, now: dict, run, scheduler, calls: int, say) -> None:
    """After the checkpoint was loaded: move the run and its schedule to this run's settings, a line per change."""
    changed = changed_settings(recorded, now)
    if not changed:
        return
    for name, (old, new) in changed.items():
        if name not in DERIVED:
            say(f"resume: {name} {old!r} -> {new!r}{_meaning(name, run)}")
    if "examples_per_step" in changed:
        _continue_after_same_examples(run, *changed["examples_per_step"], say)
    if any(name in changed for name in (*SCHEDULE, *STEP_SIZE, "optimizer_steps")):  # or the run's length
        if _reposition(scheduler, run.global_step * calls, recorded["learning_rate"], now["learning_rate"]):
            rate = scheduler.get_last_lr()[0]
            say(f"resume: the schedule ({now['lr_scheduler_type']}, peak {now['learning_rate']:g}) goes on at step "
                f"{run.global_step} of {run.last_step}: learning rate {rate:.4g} now")
        else:
            say(f"resume: the {now['lr_scheduler_type']} schedule keeps the checkpoint's state (it is not a LambdaLR)")


def _meaning(name: str, run) -> str:
    if name == "seed":
        within = f"; the resumed epoch skips its first {run.resumed_step} steps of the new order, which are not the " \
                 "examples trained before" if run.resumed_step else ""
        return f": epochs from here on are shuffled by the new seed{within}"
    if name in ("num_epochs", "max_steps"):
        return f": the run now ends after optimizer step {run.last_step}"
    if name == "learning_rate":
        return ": the schedule's peak from here on"
    return ""


def _continue_after_same_examples(run, old: int, new: int, say) -> None:
    """`old` -> `new` examples a step: the checkpoint's steps, and its epoch's trained part, counted in new steps."""
    trained, within = run.global_step * old, run.resumed_step * old
    step = within // new
    if run.resumed_step:
        run.resumed_loss = run.resumed_loss * step // run.resumed_step  # the epoch's mean loss so far is kept
    run.global_step, run.resumed_step = trained // new, step
    again = within - step * new
    part = f"; the resumed epoch skips its first {step * new} examples" if within else ""
    again = f" ({again} examples of a part step are trained again)" if again else ""
    say(f"resume: {old} -> {new} examples a step: the {trained} examples trained are step {run.global_step} "
        f"now{part}{again}")


def _reposition(scheduler, position: int, old_rate: float, new_rate: float) -> bool:
    """Put a LambdaLR (every transformers schedule the project offers) at `position` of its new lambdas, with the
    peak `new_rate` where it had `old_rate` (exactly: a ratio would be an ulp off the rate a fresh run uses)."""
    from torch.optim.lr_scheduler import LambdaLR

    inner = getattr(scheduler, "scheduler", scheduler)  # Accelerate's prepared scheduler wraps torch's
    if not isinstance(inner, LambdaLR):
        return False
    inner.base_lrs = [new_rate if base == old_rate else base * new_rate / old_rate for base in inner.base_lrs]
    inner.last_epoch = position
    rates = [base * rule(position) for base, rule in zip(inner.base_lrs, inner.lr_lambdas, strict=True)]
    for group, base, rate in zip(inner.optimizer.param_groups, inner.base_lrs, rates, strict=True):
        group["initial_lr"], group["lr"] = base, rate
    inner._last_lr = rates
    return True
