"""When a run writes checkpoints and where it resumes: a callback of the training loop (callbacks.py).

A checkpoint after every epoch, and inside epochs every `--save_steps` optimizer steps or `--save_minutes`
minutes; `--resume` continues from the newest complete one, mid-epoch ones too. How a checkpoint is written
so that a kill cannot spoil it is checkpointing.py's job; what it holds is the layout's (parallel/); which checkpoint
a resume may trust is resume.py's, and what a resume with other settings does is resume_changes.py's.
"""

import time

from ..config.groups import CheckpointOptions
from ..launch.processes import agree
from . import checkpointing, resume
from .resume_changes import apply_changes


def facts(task_name: str, learning_rate: float, precision_report, parts, layout_files: str) -> dict:
    """What a checkpoint records beside the options: what they leave open, and the run's sizes."""
    return {"task": task_name, "stored_dtype": precision_report.stored["weights"], "checkpoint_files": layout_files,
            "learning_rate": learning_rate, "examples_per_step": parts.global_batch,
            "steps_per_epoch": parts.steps_per_epoch, "optimizer_steps": parts.optimizer_steps}


class SavePolicy:
    """When a step checkpoint is due: every `save_steps` optimizer steps, or `save_minutes` after the last save."""

    def __init__(self, save_steps: int | None, save_minutes: float | None):
        self.save_steps, self.save_minutes = save_steps, save_minutes
        self._last = time.monotonic()

    def due(self, global_step: int) -> bool:
        by_steps = bool(self.save_steps) and global_step % self.save_steps == 0
        by_time = bool(self.save_minutes) and time.monotonic() - self._last >= self.save_minutes * 60
        return by_steps or by_time

    def saved(self) -> None:
        self._last = time.monotonic()


class Checkpoints:
    """Resumes at the start of the run, saves when due and after every epoch (unless --checkpoint false)."""

    def __init__(self, accelerator, layout, options: CheckpointOptions, say, guard, parts, settings: dict):
        self.accelerator, self.layout, self.options, self.say = accelerator, layout, options, say
        self.guard = guard  # the run's LossGuard: it reads the loss so far before a step checkpoint
        self.parts, self.settings = parts, settings  # settings: what every checkpoint records (resume.settings_of)
        self.enabled = options.checkpoint
        self.policy = SavePolicy(options.save_steps, options.save_minutes)
        self.last = None  # the newest checkpoint this run wrote
        self.written, self.seconds = 0, 0.0
        self._saved_at_step = None

    def on_fit_start(self, run) -> None:
        if not self.options.resume:
            return
        found = resume.choose(self.accelerator, self.options.output_dir, self.settings, self.say)  # intact, settings it may continue
        if found is None:
            self.say(f"resume: no checkpoint in {self.options.output_dir}; starting from scratch")
            return
        self.layout.load_state(self.accelerator, found)
        run.resume_at(checkpointing.read_progress(found))
        within = f", step {run.resumed_step} of epoch {run.first_epoch + 1}" if run.resumed_step else ""
        self.say(f"resume: continuing after epoch {run.first_epoch}{within} from {found}")
        calls = self.layout.scheduler_calls_per_step(self.accelerator)
        apply_changes(resume.read_settings(found), self.settings, run, self.parts.scheduler, calls, self.say)

    def at_step_boundary(self, run) -> None:
        if self.enabled and self._due(run.global_step):
            self.save(run, inside_epoch=True)

    def at_epoch_end(self, run) -> None:
        if self.enabled:
            self.save(run, inside_epoch=False)

    def saved_at(self, global_step: int) -> bool:
        return self._saved_at_step == global_step

    def save(self, run, inside_epoch: bool) -> None:
        started = time.perf_counter()
        # Inside an epoch, the whole run's loss so far (one read, only when saving): a resumed epoch reports the
        # same mean as an uninterrupted one. The loss guard reads with it and stops the run before a checkpoint
        # could hold non-finite weights (fault_tolerance/loss_guard.py).
        loss = self.guard.read(run) if inside_epoch else None
        self.last = checkpointing.save_checkpoint(
            self.accelerator, self.options.output_dir, run.progress(loss), self.options.keep_checkpoints,
            self.layout.save_state, self.settings,
        )
        self.written += 1
        self.seconds += time.perf_counter() - started
        self._saved_at_step = run.global_step
        self.policy.saved()

    def _due(self, global_step: int) -> bool:
        due = self.policy.due(global_step)
        if self.policy.save_minutes:
            # A clock: the processes may read it on either side of the mark, and all must save at the same step.
            (due,) = agree(self.accelerator, due)
        return due

    def report(self) -> dict:
        return {"checkpoint": str(self.last) if self.last else None, "checkpoints_written": self.written,
                "checkpoint_seconds": self.seconds}
