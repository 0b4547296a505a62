"""The recompilation watch: every XLA graph a run compiles, when, with which batch, and why.

A callback of the training loop (callbacks.py): after each step it looks at this process's compilation counter, a
host-side number (no graph, no device transfer). Graphs compiled during warm-up are expected:
the first WARMUP_TRAIN_STEPS training steps, the whole first evaluation, and whatever else the
first epoch compiles (a reduction across processes, a checkpoint). Any graph after that is a
**recompilation**: the run prints one line per distinct cause that names what changed and the
fix, the report counts them, and `--max_recompilations N` stops the run at the N+1-th.

The cause and the Python frame come from torch_xla's own analysis (compile_analysis.py).
"""

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config.errors import UserError
from ..xla import compilation
from .compile_analysis import HOST_READ, Analysis, parse_analyses

# Training may compile up to three graphs before its steady state: the first step, the first step with
# optimizer state, the steady step (Adafactor and Kahan's AdamW make their state in their first step; the default
# AdamW makes it before, so its step compiles once).
WARMUP_TRAIN_STEPS = 3
PHASES = ("train", "eval", "other")


class RecompilationLimit(UserError, RuntimeError):
    """More recompilations than --max_recompilations allows; the message names the last one."""

    # Every process runs the same graphs, so every process stops at the same step.
    every_process = True


@dataclass
class Graph:
    number: int
    phase: str
    epoch: int
    step: int | None
    compile_seconds: float | None
    batch_shapes: dict | None
    warmup: bool
    cause: str | None = None
    frame: str | None = None
    why: str | None = None  # for a recompilation: the kind of cause ("shape", "host read at ...")


def batch_shapes(batch) -> dict:
    """{name: shape} of a batch's tensors (metadata: reading it costs nothing on the device)."""
    return {name: tuple(value.shape) for name, value in batch.items() if hasattr(value, "shape")}


@dataclass
class GraphWatch:
    padding: str
    max_recompilations: int | None
    say: object  # the run's print-once-on-the-main-process
    analysis_file: Path | None = None
    graphs: list = field(default_factory=list)
    recompilations: int = 0
    _count: int = 0
    _read: int = 0
    _train_steps: int = 0
    _warm: dict = field(default_factory=lambda: {"eval": True, "other": True})
    _last_shapes: dict = field(default_factory=dict)
    _said: set = field(default_factory=set)
    _last_step: tuple | None = None  # (epoch, time) of the last training step
    _step_seconds: list = field(default_factory=list)
    host_seconds: float = 0.0  # the watch's own time in its checks: what it adds to the run at most

    def start(self) -> None:
        """From here on every new graph is the loop's (the precision check and set-up came before)."""
        self._count = compilation.compilations_so_far() or 0
        self._read = len(self._analyses())

    # The loop's points (callbacks.py).
    def on_fit_start(self, run) -> None:
        self.start()

    def after_train_step(self, run, batch) -> None:
        self.check("train", run.epoch, run.step, batch)

    def after_eval_step(self, run, step: int, batch) -> None:
        self.check("eval", run.epoch, step, batch)

    def after_evaluation(self, run) -> None:
        self.check("other", run.epoch)  # the epoch's reductions and reads
        self.warmed_up("eval")

    def at_epoch_end(self, run) -> None:
        self.check("other", run.epoch)  # the epoch's checkpoint, written just before
        self.warmed_up("other")

    def check(self, phase: str, epoch: int, step: int | None = None, batch=None) -> None:
        """Look for graphs compiled since the last check; call after the step's sync."""
        started = time.perf_counter()
        try:
            self._check(phase, epoch, step, batch)
        finally:
            self.host_seconds += time.perf_counter() - started

    def _check(self, phase: str, epoch: int, step: int | None, batch) -> None:
        shapes = batch_shapes(batch) if batch is not None else None
        new = (compilation.compilations_so_far() or 0) - self._count
        if phase == "train":
            self._train_steps += 1
            self._time_step(epoch, new)
        if new <= 0:
            if shapes:
                self._last_shapes[phase] = shapes
            return
        self._count += new
        seconds = compilation.last_compile_seconds(new)
        analyses = self._analyses()
        fresh, self._read = analyses[self._read:self._read + new], self._read + new
        warmup = self._train_steps <= WARMUP_TRAIN_STEPS if phase == "train" else self._warm[phase]
        what, kind = (None, None) if warmup else self._explain(phase, shapes, fresh[0] if fresh else None)
        for index in range(new):
            analysis = fresh[index] if index < len(fresh) else None
            self.graphs.append(Graph(
                len(self.graphs) + 1, phase, epoch + 1, step, seconds[index] if seconds else None, shapes, warmup,
                analysis.cause if analysis else None, analysis.frame if analysis else None, kind,
            ))
        if shapes:
            self._last_shapes[phase] = shapes
        if not warmup:
            self._recompiled(new, phase, epoch, step, what, kind)

    def steady_step_seconds(self) -> float | None:
        """Median time between two training steps of one epoch that compiled nothing, after warm-up."""
        return statistics.median(self._step_seconds) if self._step_seconds else None

    def _time_step(self, epoch: int, new: int) -> None:
        # The steps are asynchronous, so one interval is not one step's time; their median is, in steady state.
        now = time.perf_counter()
        if self._last_step and self._last_step[0] == epoch and not new and self._train_steps > WARMUP_TRAIN_STEPS + 1:
            self._step_seconds.append(now - self._last_step[1])
        self._last_step = (epoch, now)

    def warmed_up(self, phase: str) -> None:
        """The first evaluation (phase "eval") or the first epoch (phase "other") is over."""
        self._warm[phase] = False

    def recompilation_causes(self) -> dict:
        """{phase: kind of cause: graphs} over the recompilations."""
        causes = {}
        for graph in self.graphs:
            if not graph.warmup:
                key = f"{graph.phase}: {graph.why}"
                causes[key] = causes.get(key, 0) + 1
        return causes

    def report(self) -> dict:
        return {
            "compiled": len(self.graphs),
            "warmup": sum(graph.warmup for graph in self.graphs),
            "recompilations": self.recompilations,
            "recompilation_causes": self.recompilation_causes(),
            "causes_from": "torch_xla analysis (PT_XLA_DEBUG_LEVEL=1)" if self.analysis_file else None,
            "watch_seconds": self.host_seconds,
            "graphs": [asdict(graph) for graph in self.graphs],
        }

    def _analyses(self) -> list[Analysis]:
        if self.analysis_file is None or not self.analysis_file.is_file():
            return []
        return parse_analyses(self.analysis_file.read_text(errors="replace"))

    def _recompiled(self, new, phase, epoch, step, what, kind) -> None:
        self.recompilations += new
        where = f"epoch {epoch + 1} {phase} step {step}" if step else f"epoch {epoch + 1}, after the {phase} steps"
        message = f"{where}: new {phase} graph ({self.recompilations} recompilation(s) so far): {what}"
        if self.max_recompilations is not None and self.recompilations > self.max_recompilations:
            raise RecompilationLimit(f"{message} (stopped: --max_recompilations {self.max_recompilations})")
        if (phase, kind) not in self._said:
            self._said.add((phase, kind))
            self.say(f"recompilation: {message}")

    def _explain(self, phase, shapes, analysis) -> tuple[str, str]:
        """(what changed and the fix, a key that is the same for the same cause)."""
        before = self._last_shapes.get(phase)
        if shapes and before and shapes != before:
            now, then = _main_shape(shapes), _main_shape(before)
            change = f"batch shape {now} after {then}"
            if now[0] != then[0]:
                fix = "a batch with another number of rows (a ragged last batch): drop it in training, pad it in evaluation"
            elif self.padding == "dynamic":
                fix = "padding='dynamic' pads to the longest row: use padding='fixed'"
            elif self.padding == "buckets":
                fix = "padding='buckets' compiles one graph per bucket length: use padding='fixed' for one"
            else:
                fix = "a new input shape: pad every batch to one shape"
            return f"{change}; {fix}", "shape"
        if analysis is None:
            return ("the same batch shape, so something in the step changed the graph (a Python number that varies, "
                    "a read of a tensor on the host): run with PT_XLA_DEBUG_LEVEL=2 to see why", "unknown")
        frame = f" at {analysis.frame}" if analysis.frame else ""
        if analysis.cause == HOST_READ:
            return (f"a tensor read on the host before the step's sync{frame} (.item(), .tolist(), print, a Python "
                    "branch on a tensor): keep values on the device and read them once, after the loop",
                    f"host read{frame}")
        return f"torch_xla says: {analysis.cause}{frame}", f"{analysis.cause}{frame}"


def _main_shape(shapes: dict) -> tuple:
    return shapes.get("input_ids") or next(iter(shapes.values()))


