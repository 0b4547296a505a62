"""Where a run stands (epoch, step, loss so far) and what it has counted (examples, seconds, graphs).

One small object, passed to every callback: a checkpoint saves its `progress()` and a resumed run
starts from it with `resume_at()`.
"""

import time
from dataclasses import dataclass, field

from ..watch.compilations import compile_counts
from ..watch.host_tracing import HostTracing


@dataclass
class RunState:
    steps_per_epoch: int
    examples_per_step: int  # one optimizer step's examples (Prepared.global_batch)
    num_epochs: int  # epochs the run reaches (fewer than --num_epochs when --max_steps ends it sooner)
    last_step: int  # the run's last optimizer step (Prepared.optimizer_steps)
    eval_steps: int | None = None  # also evaluate every this many optimizer steps
    # Position. `step` counts the batches of `epoch` trained, those of a resumed epoch's first part too.
    epoch: int = 0
    step: int = 0
    global_step: int = 0  # optimizer steps of the whole run, resumed ones included
    first_epoch: int = 0  # this run's first epoch (a resumed run starts where its checkpoint stopped)
    resumed_step: int = 0  # batches of first_epoch trained before the checkpoint
    resumed_loss: int = 0  # the loss those batches summed, in fixed_point's units
    # Counters and timing.
    train_loss: float | None = None
    evaluation: dict = field(default_factory=dict)  # the latest evaluation's metrics
    evaluations: list = field(default_factory=list)  # every evaluation of this run, with its epoch and global step
    # The best evaluation so far and the evaluations since it (best_model.py): in every checkpoint's progress.
    best: dict = field(default_factory=dict)
    stop_reason: str | None = None  # set by a callback (early stopping): the loop ends at its next boundary
    trained_examples: int = 0
    seconds: float = 0.0
    steady_examples: int = 0  # epochs after this run's first, compile time taken out
    steady_seconds: float = 0.0
    compiled_by_epoch: list = field(default_factory=list)  # cumulative: later epochs must add nothing
    first_learning_rate: float | None = None
    last_learning_rate: float | None = None
    # The latest step's gradient norm before clipping, kept (lazy) until the next step: an output of every step's
    # graph, so that reading it at a logging step changes no graph (watch/metrics_log.py).
    grad_norm: object = None
    shown: dict = field(default_factory=dict)  # the latest log's numbers, for the progress bar
    tracing: HostTracing = field(default_factory=HostTracing)  # the host's seconds per step, up to the graph's hand-over
    _epoch_started: float = 0.0
    _compile_seconds_at_start: float = 0.0

    def resume_at(self, progress: dict) -> None:
        """Continue after a checkpoint's progress (written by `progress()`)."""
        self.first_epoch = self.epoch = progress["epochs_done"]
        self.resumed_step = progress.get("epoch_step", 0)
        self.resumed_loss = int(progress.get("loss_sum", 0))
        # A checkpoint written by an earlier version of this project has no global step.
        self.global_step = progress.get("global_step", self.first_epoch * self.steps_per_epoch)
        self.best = progress.get("best", {})  # none before this project kept one

    def progress(self, loss_so_far: int | None = None) -> dict:
        """What a checkpoint records: inside the epoch (given the epoch's loss so far), or after it (the next one)."""
        if loss_so_far is not None:
            return {"epochs_done": self.epoch, "epoch_step": self.step, "global_step": self.global_step,
                    "loss_sum": loss_so_far, "best": self.best}
        return {"epochs_done": self.epoch + 1, "epoch_step": 0, "global_step": self.global_step, "loss_sum": 0,
                "best": self.best}

    def reached_the_end(self, epoch: int) -> bool:
        """True before `epoch` when the run has trained its last step: a resumed run that had reached --max_steps.

        Not when its checkpoint was written inside `epoch` (after its last step, before the epoch's evaluation and
        checkpoint, as a preemption can): the epoch then has only those left to do.
        """
        return self.global_step >= self.last_step and not (epoch == self.first_epoch and self.resumed_step)

    def begin_epoch(self, epoch: int) -> int:
        """Start `epoch`; return the batches of it already trained (a resumed epoch's), to skip."""
        self.epoch = epoch
        self.step = self.resumed_step if epoch == self.first_epoch else 0
        self._epoch_started = time.perf_counter()
        self._compile_seconds_at_start = compile_counts().compile_seconds or 0.0
        return self.step

    def after_step(self) -> None:
        self.step += 1
        self.global_step += 1

    def end_training_part(self, skipped: int) -> None:
        """The epoch's training is over: count its examples and seconds (compile time out, after the first epoch)."""
        elapsed = time.perf_counter() - self._epoch_started
        examples = (self.step - skipped) * self.examples_per_step
        self.seconds += elapsed
        self.trained_examples += examples
        if self.epoch > self.first_epoch:
            self.steady_examples += examples
            compiling = (compile_counts().compile_seconds or 0.0) - self._compile_seconds_at_start
            self.steady_seconds += elapsed - compiling

    def record_compilations(self) -> None:
        self.compiled_by_epoch.append(compile_counts().compilations)

    def speeds(self) -> dict:
        return {
            # Everything, compilation included: on a short run mostly compilation. The steady figure is the speed.
            "examples_per_second_with_compilation": self.trained_examples / self.seconds if self.seconds else None,
            "steady_examples_per_second": self.steady_examples / self.steady_seconds if self.steady_seconds > 0 else None,
        }
