"""Numbers every --logging_steps optimizer steps, read without making the device wait: a callback (loop/callbacks.py).

transformers' Trainer calls `.item()` on the loss at each logging step: on XLA the host then waits until the device
has run every queued step, and the device waits while the host traces the next one. Here a log step hands the
tensors it wants to a thread of its own (`HostReads`) once the step is dispatched; that thread alone waits for the
device, while the loop goes on tracing and dispatching. The step graph is the same at every step, logged or not: the
loss is the loss guard's running sum (fault_tolerance/loss_guard.py), already an output of every step, and the
gradient norm is kept as an output of every step too. torch_xla's own answer, `add_step_closure(run_async=True)`,
does the same on its thread; this one also runs without torch_xla (the processes of the tests) and can be waited for
at the end.

Each log (and each evaluation) becomes one line of OUTPUT_DIR/metrics.jsonl, written by the main process and flushed,
the same values go to Accelerate's trackers (--report_to), and the latest ones to the progress bar's postfix. A
resumed run keeps the lines up to its checkpoint's step and appends after them, so each step appears once.

The loss of a log is the mean of the steps since the previous log (or since the epoch began): under the data layout
with several processes, the main process's share of each batch (the epoch's loss, printed at its end, is every
process's); under fsdp one process per host sees the whole batch.
"""

import json
import queue
import threading
import time
from pathlib import Path

from ..config.groups import WatchOptions
from ..fault_tolerance.loss_guard import BAD, LOSS, STEPS
from ..launch import processes
from ..precision.fixed_point import from_fixed
from . import curves

METRICS_FILE = "metrics.jsonl"


class HostReads:
    """Copies device tensors to the host on a thread of its own, in the order they were handed in."""

    def __init__(self):
        self._asked, self._read = queue.Queue(), queue.Queue()
        self._thread = threading.Thread(target=self._run, name="metrics-reads", daemon=True)
        self._thread.start()

    def ask(self, key, tensors: list) -> None:
        """Read these later. Give only tensors whose graph was dispatched (after the step's sync): a lazy tensor
        still to be traced would make this thread compile and run a graph of its own."""
        self._asked.put((key, tensors))

    def _run(self) -> None:
        while (item := self._asked.get()) is not None:
            key, tensors = item
            try:
                self._read.put((key, [tensor.detach().cpu() for tensor in tensors]))  # waits for the device, here only
            except Exception as error:  # handed to the loop's thread, which raises it
                self._read.put((key, error))
            self._asked.task_done()

    def done(self) -> list:
        """(key, host tensors) of every read finished so far, without waiting."""
        finished = []
        while True:
            try:
                key, values = self._read.get_nowait()
            except queue.Empty:
                return finished
            if isinstance(values, Exception):
                raise values
            finished.append((key, values))

    def wait(self) -> list:
        """(key, host tensors) of every read asked for so far, once each is finished; the thread goes on."""
        self._asked.join()
        return self.done()

    def finish(self) -> list:
        """Wait for every read asked for; stop the thread."""
        self._asked.put(None)
        self._thread.join()
        return self.done()


class MetricsLog:
    """Every `every` optimizer steps: the window's mean loss, the learning rate, the gradient norm before clipping, and
    examples and tokens per second per chip; each evaluation's metrics too."""

    def __init__(self, accelerator, guard, watch: WatchOptions, options: dict, chips: int, steps_per_epoch: int):
        """`options`: every option of the run by its flat name (asdict of its TrainConfig), output_dir among them."""
        self.accelerator, self.guard, self.every = accelerator, guard, watch.logging_steps
        output_dir = options["output_dir"]
        # What a tracker stores as the run's hyperparameters: the options that have a value of a plain type.
        self.tracked_config = {key: value for key, value in options.items() if isinstance(value, (bool, int, float, str))}
        self.path = Path(output_dir) / METRICS_FILE
        # Accelerate gives every tracker one name: TensorBoard's folder under OUTPUT_DIR (outputs/tensorboard), and the
        # project of a wandb or trackio run, which is this package's name.
        self.tracker_project = "tensorboard" if watch.report_to == "tensorboard" else __package__.split(".")[0]
        self.chips, self.steps_per_epoch = chips, steps_per_epoch
        self.main = processes.is_main(accelerator)
        self.reads = HostReads() if self.main and self.every else None
        self.logs = 0
        self._file = None
        self._last_read = None  # (epoch, the guard's values) of the previous log written: where a window starts
        self._since = (0.0, 0, 0)  # (time of the previous log, examples and tokens since)

    # The loop's points (callbacks.py).
    def on_fit_start(self, run) -> None:
        """After the checkpoints' on_fit_start: a resumed run's step is known, and lines past it are dropped."""
        if not self.main:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = [line for line in _lines(self.path) if json.loads(line)["step"] <= run.global_step]
        self.path.write_text("".join(line + "\n" for line in kept))
        # TensorBoard's purge_step drops a resumed run's events from its checkpoint's step on, as the lines above.
        resumed = {"tensorboard": {"purge_step": run.global_step + 1}} if run.global_step else {}
        self.accelerator.init_trackers(self.tracker_project, config=self.tracked_config, init_kwargs=resumed)
        self._file = self.path.open("a")
        self._since = (time.perf_counter(), 0, 0)

    def before_sync(self, run) -> None:
        """The first step's graph is about to compile, which releases the GIL for a second or more: the picture's
        library is imported on a thread meanwhile (watch/curves.py). Measured on the benchmarks' 24-step demo run
        (XLA:CPU): the picture at the end took 0.5-0.66 s, 0.18-0.21 s so, and the training no longer; started
        before the first step instead, the import slowed its tracing by 0.3-0.45 s."""
        if self.main:
            curves.import_in_background()

    def after_train_step(self, run, batch) -> None:
        if self.reads is None:
            return
        rows, tokens = batch_size(batch)
        started, examples, seen = self._since
        examples, seen = examples + rows, seen + tokens
        self._since = (started, examples, seen)
        if run.global_step % self.every == 0:
            now = time.perf_counter()
            # Per chip: every process's batch has this shape; `chips` share them (data: processes; fsdp: all chips).
            share = self.accelerator.num_processes / self.chips / (now - started)
            fields = {
                "step": run.global_step, "epoch": self._epoch(run),
                "learning_rate": run.last_learning_rate,  # a host float: the rate this step used
                "examples_per_second_per_chip": examples * share, "tokens_per_second_per_chip": seen * share,
            }
            tensors = [self.guard.values] + ([run.grad_norm] if run.grad_norm is not None else [])
            # A window starts at the previous log, or where the guard's sums start the epoch (a resumed epoch's loss so
            # far, 0 steps): known when this read is written, since the reads finish in order.
            start = (run.resumed_loss if run.epoch == run.first_epoch else 0, 0, 0)
            self.reads.ask((run.epoch, start, fields), tensors)
            self._since = (now, 0, 0)
        self._write_finished(run, self.reads.done())

    def after_evaluation(self, run) -> None:
        if self.reads is not None:
            # The logs of the steps before this evaluation first, in step order: a read may still be in flight (the
            # JAX step dispatches the next step fast; seen: step 15's line written after step 16's evaluation). The
            # evaluation has read its own results, so the device has run those steps: a short wait.
            self._write_finished(run, self.reads.wait())
        if self.main:
            self._write({"step": run.global_step, "epoch": self._epoch(run), **run.evaluation})

    def on_fit_end(self, run) -> None:
        if self.reads is not None:
            self._write_finished(run, self.reads.finish())
            self.reads = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _epoch(self, run) -> float:
        """Epochs done so far, fractional (as Trainer logs them)."""
        return round(run.epoch + run.step / self.steps_per_epoch, 4)

    # Writing.
    def _write_finished(self, run, finished: list) -> None:
        for (epoch, start, fields), values in finished:
            sums = values[0].tolist()
            if self._last_read is not None and self._last_read[0] == epoch:
                start = self._last_read[1][LOSS], self._last_read[1][STEPS], self._last_read[1][BAD]
            self._last_read = epoch, sums
            steps, bad = sums[STEPS] - start[1], sums[BAD] - start[2]
            # A non-finite loss counts 0 in the sum: the window has no mean then (the guard stops the run at its read).
            record = {"loss": None if bad else from_fixed(sums[LOSS] - start[0]) / steps, **fields}
            if bad:
                record["non_finite_steps"] = bad
            if len(values) > 1:
                record["grad_norm"] = float(values[1])
            self._write(record)
            self.logs += 1
            run.shown = {"loss": "nan" if bad else f"{record['loss']:.4g}", "lr": f"{record['learning_rate']:.3g}"}

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        tracked = {f"{'eval' if key.startswith('eval_') else 'train'}/{key.removeprefix('eval_')}": value
                   for key, value in record.items() if key not in ("step", "epoch") and isinstance(value, (int, float))}
        self.accelerator.log(tracked, step=record["step"])

    def report(self) -> dict:
        return {"logging_steps": self.every, "logs": self.logs, "metrics_file": str(self.path)}


def batch_size(batch) -> tuple[int, int]:
    """(rows, token positions) of one process's loader batch, read from shapes on the host (padding included)."""
    shape = batch["input_ids"].shape
    return shape[0], shape[0] * (shape[1] if len(shape) > 1 else 1)


def _lines(path: Path) -> list:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
