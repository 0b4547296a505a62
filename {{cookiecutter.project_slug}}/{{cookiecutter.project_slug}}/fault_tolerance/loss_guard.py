"""The epoch's training loss, summed on the device, and the guard that stops a run whose loss is not finite (in
training, or in an evaluation: its sums count the non-finite losses, tasks/).

Once one loss is NaN or infinite its gradients are too, AdamW carries them into every weight, and every later step
trains nothing: a run that goes on ends "successfully" with a NaN model. Reading the loss after every step to catch
it would stall the device (a device-to-host transfer and a wait per step). Instead each step updates, on the device and
inside the step's own graph, one int64 vector: the loss sum (fixed point, exact in every precision level) and three
counters, steps seen, non-finite steps and the first non-finite one. It is read where the loop read the loss anyway,
in one transfer and without a graph of its own: with the epoch's loss at its end, and with the
loss so far before a checkpoint is written inside an epoch. So no checkpoint ever holds the NaN weights, and the
newest one written before the failure (the last good one) stays on disk.
"""

import torch

from ..config.errors import UserError
from ..launch import processes
from ..precision.fixed_point import finite_to_fixed
from ..xla import device as devices
from . import checkpointing

# The vector: the epoch's loss so far (fixed point), steps seen this epoch, non-finite steps, the first of them (0: none)
LOSS, STEPS, BAD, FIRST_BAD = range(4)
EXIT_CODE = 3  # not 2 (bad input) nor 75 (preempted: a scheduler may retry that); a retry would fail the same way


class NonFiniteLoss(UserError):
    """The training loss was NaN or infinite: said in one line, and the run exits with EXIT_CODE."""

    exit_code = EXIT_CODE
    every_process = True  # every process reads the same gathered counters and stops at the same point


class LossGuard:
    """Sums the epoch's losses and counts the non-finite ones on the device; `read` stops the run on any."""

    def __init__(self, accelerator, level: str, learning_rate: float, output_dir):
        self.accelerator, self.level, self.learning_rate = accelerator, level, learning_rate
        self.output_dir = output_dir  # where the last good checkpoint is: the newest complete one (LATEST)
        self.values = None
        self.first_step = 0  # the global step before this epoch's first counted one

    def begin_epoch(self, run, loss_before: int) -> None:
        """Start the epoch's sums: `loss_before` is a resumed epoch's loss so far (fixed point), on the main process.

        As data, not a graph constant; on the main process only, so that the sum over processes is it.
        """
        main = self.accelerator.is_main_process
        self.values = devices.device_values([loss_before if main else 0, 0, 0, 0], torch.int64, self.accelerator.device)
        self.first_step = run.global_step

    def add(self, loss) -> None:
        """After a step: add its (lazy) loss, in the step's graph."""
        fixed, bad = finite_to_fixed(loss.reshape(()))
        steps = self.values[STEPS] + 1
        first = torch.where((self.values[FIRST_BAD] == 0) & (bad > 0), steps, self.values[FIRST_BAD])
        self.values = torch.stack([self.values[LOSS] + fixed, steps, self.values[BAD] + bad, first])

    def add_steps(self, losses, real) -> None:
        """After a call of several steps (--steps_per_execution): add each real step's loss in order (`real`: 1 for a
        real step, 0 for a masked one, whose loss counts nothing), in the call's graph."""
        fixed, bad = finite_to_fixed(losses)
        real = real.long()
        bad = bad * real
        steps = self.values[STEPS] + torch.cumsum(real, 0)  # each step's count this epoch
        first_here = torch.min(torch.where(bad > 0, steps, torch.iinfo(torch.int64).max))
        first = torch.where((self.values[FIRST_BAD] == 0) & (bad.sum() > 0), first_here, self.values[FIRST_BAD])
        self.values = torch.stack([self.values[LOSS] + (fixed * real).sum(), steps[-1], self.values[BAD] + bad.sum(),
                                   first])

    def read(self, run) -> int:
        """The epoch's loss so far (fixed point, summed over processes), read in one transfer with the counters.

        Raises NonFiniteLoss when any step of any process had a non-finite loss.
        """
        # The device tensor is read as it is: a reshape on the device first would be one more graph.
        values = processes.gather_over_processes(self.accelerator, self.values).tolist()
        rows = [values[start:start + 4] for start in range(0, len(values), 4)]
        loss_total = sum(row[LOSS] for row in rows)
        bad = sum(row[BAD] for row in rows)
        if bad:
            steps = rows[0][STEPS]
            first = min(row[FIRST_BAD] for row in rows if row[BAD])
            raise NonFiniteLoss(self.message(run, first, bad, steps))
        return loss_total

    def check_evaluation(self, run, evaluation: dict) -> None:
        """Stop the run when an evaluation met a non-finite loss (its sums, read anyway, count them), before the
        epoch's checkpoint: the newest one on disk stays the last good one."""
        bad = evaluation.get("eval_non_finite_losses")
        if bad:
            what = "tokens" if "eval_tokens_counted" in evaluation else "examples"  # the task's unit of loss
            raise NonFiniteLoss(
                f"the eval loss was not finite (NaN or infinite) for {bad} of the {evaluation[f'eval_{what}_counted']} "
                f"{what} evaluated after global step {run.global_step} (epoch {run.epoch + 1}) at precision level "
                f"{self.level}; {self._kept()}; {likely_fix(self.level, self.learning_rate)}"
            )

    def _kept(self) -> str:
        last = checkpointing.latest_checkpoint(self.output_dir)
        return f"the last good checkpoint, kept, is {last} (--resume continues from it)" if last else (
            "no checkpoint was written before it")

    def message(self, run, first: int, bad: int, steps: int) -> str:
        checked = f"{self.first_step + 1}-{self.first_step + steps}"
        kept = self._kept()
        return (
            f"the training loss was not finite (NaN or infinite) from global step {self.first_step + first} "
            f"({bad} of the {steps * self.accelerator.num_processes} step losses of steps {checked}, epoch "
            f"{run.epoch + 1}) at precision level {self.level}, learning rate {self.learning_rate:g}; {kept}; "
            f"{likely_fix(self.level, self.learning_rate)}"
        )


def likely_fix(level: str, learning_rate: float) -> str:
    lower = f"a lower --learning_rate (this run: {learning_rate:g})"
    if level == "fp32":
        return f"try {lower}"
    if level == "bf16":  # the default: bf16 compute on float32 weights
        return f"try float32 (--mixed_precision no) or {lower}"
    return f"try the bf16 default (float32 weights: --pure_bf16 no), float32 (--mixed_precision no), or {lower}"
