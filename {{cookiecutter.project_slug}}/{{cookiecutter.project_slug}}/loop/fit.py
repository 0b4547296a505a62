"""The one training loop: `Loop.fit` runs the epochs, `train_epoch` one epoch's optimizer steps (step.py), and
`evaluate_now` the eval set (evaluation.py), for either layout and either task.

It only trains and evaluates: checkpoints, preemption, the metrics log and the graph watch answer its named points
(callbacks.py); training.py builds what it is given.
"""

import functools

from tqdm.auto import tqdm

from ..fault_tolerance.loss_guard import LossGuard
from ..launch import processes
from ..precision import levels as precision
from ..precision.fixed_point import from_fixed
from ..tasks import task
from ..xla import device as devices
from .calls import Calls
from .context import RunContext
from .evaluation import evaluate
from .run_state import RunState
from .step import train_step


class Loop:
    """The one loop over a run's prepared parts (preparation.py): `fit` runs the epochs, `train_epoch` one epoch's
    optimizer steps, `evaluate_now` the eval set; the callbacks act at their named points (callbacks.py).

    `guard` (fault_tolerance/loss_guard.py) stops the run at its next read of the device when a loss was not finite.
    """

    def __init__(self, context: RunContext, parts, callbacks, guard: LossGuard, calls: Calls):
        self.context, self.parts, self.callbacks, self.guard, self.calls = context, parts, callbacks, guard, calls
        self.metric_dtype = precision.metric_dtype(context.precision)

    def evaluate_now(self, run: RunState) -> dict:
        """The eval set's metrics now (after an epoch, or every --eval_steps), kept in the run's evaluations."""
        context, callbacks = self.context, self.callbacks
        eval_batch = self.parts.whole_eval or functools.partial(task.eval_batch, self.parts.model,
                                                                metric_dtype=self.metric_dtype)
        run.evaluation = evaluate(
            context.accelerator, self.parts.model, context.layout.eval_batches(self.parts.eval_loader), eval_batch,
            on_step=lambda step, batch: callbacks.after_eval_step(run, step, batch),
        )
        self.guard.check_evaluation(run, run.evaluation)  # a NaN stops the run before the epoch's checkpoint
        callbacks.after_evaluation(run)
        run.evaluations.append({"epoch": run.epoch + 1, "global_step": run.global_step, **run.evaluation})
        return run.evaluation

    def fit(self, run: RunState) -> None:
        """The epoch loop: train, evaluate, and let the callbacks act at the end of each step and epoch."""
        context, parts, callbacks = self.context, self.parts, self.callbacks
        try:
            callbacks.on_fit_start(run)  # a resumed run's position comes from its checkpoint here
            run.first_learning_rate = parts.scheduler.get_last_lr()[0]
            for epoch in range(run.first_epoch, run.num_epochs):
                if run.reached_the_end(epoch) or run.stop_reason:  # resumed after --max_steps or an early stop
                    break
                skip = run.begin_epoch(epoch)
                batches = context.layout.train_batches(context.accelerator, parts.train_loader, epoch, skip)
                run.train_loss = self.train_epoch(run, batches)
                run.end_training_part(skip)
                if not run.stop_reason:  # else an --eval_steps evaluation stopped it: the weights are the ones it evaluated
                    self.evaluate_now(run)
                context.say(f"epoch {epoch + 1}/{run.num_epochs}: train loss {run.train_loss:.4f}, "
                            f"{task.summary(run.evaluation)}")
                callbacks.at_epoch_end(run)
                run.record_compilations()
        finally:
            callbacks.on_fit_end(run)

    def train_epoch(self, run: RunState, batches) -> float:
        """One epoch's optimizer steps (a resumed epoch's remaining ones, up to --max_steps); returns its mean loss.

        Every --eval_steps optimizer steps it evaluates inside the epoch (not at its last step: the epoch's own
        evaluation follows).
        """
        accelerator, parts, callbacks, guard = self.context.accelerator, self.parts, self.callbacks, self.guard
        parts.model.train()
        guard.begin_epoch(run, run.resumed_loss if run.step else 0)
        steps = min(len(batches), run.last_step - run.global_step)
        if steps == 0 < len(batches):  # resumed after the run's last step (--max_steps) inside this epoch: nothing to train
            batches = ()
        # The bar is not given the loader: tqdm.auto's bar calls iter() on what it wraps, and each iter() of Accelerate's
        # XLA loader starts a prefetch thread that may finish the epoch and advance the shuffle's epoch counter before
        # the real pass starts (another data order in every run). A context: a run stopped mid-epoch ends the bar's line.
        bar = tqdm(total=run.step + steps, initial=run.step, desc=f"epoch {run.epoch + 1}/{run.num_epochs}",
                   disable=not processes.is_main(accelerator))
        calls, done = self.calls, 0
        with bar:
            for group in calls.groups(batches, run.global_step, steps, len(batches)):
                single = calls.steps == 1  # one step, one call: the step as it always was
                parts.steps_per_call = calls.steps
                if single:
                    run.last_learning_rate = parts.scheduler.get_last_lr()[0]
                step = train_step(accelerator, parts, group[0] if single else group, run.tracing)
                if single:
                    guard.add(step.loss)
                else:
                    guard.add_steps(step.loss, step.real)
                run.grad_norm = step.grad_norm
                callbacks.before_sync(run)
                run.tracing.handed_over(len(group))
                devices.sync(accelerator.device)
                for index, batch in enumerate(group):  # every step of the call, counted and logged as one step is
                    run.last_learning_rate = run.last_learning_rate if single else step.rates[index]
                    run.after_step()
                    callbacks.after_train_step(run, batch)  # the metrics log hands what it reads to its own thread
                    bar.update()
                done += len(group)
                if run.shown:
                    bar.set_postfix(run.shown, refresh=False)
                calls.after_call(run)
                if run.eval_steps and run.global_step % run.eval_steps == 0 and done < steps:
                    self.context.say(f"step {run.global_step}: {task.summary(self.evaluate_now(run))}")
                    parts.model.train()
                callbacks.at_step_boundary(run)
                if run.stop_reason:
                    break
        # One transfer per epoch, the loss and the guard's counters together: reading every step would stall the device.
        total = guard.read(run)
        return from_fixed(total) / max(run.step * accelerator.num_processes, 1)
