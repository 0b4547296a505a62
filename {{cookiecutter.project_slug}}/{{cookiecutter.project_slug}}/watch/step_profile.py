"""--profile_steps A-B: a profiler trace of optimizer steps A to B (counted over the whole run, from 1), a callback
(loop/callbacks.py).

The trace starts once step A-1 is dispatched and stops after step B has run, so it holds those steps' tracing,
compilation (if any) and execution; TensorBoard's profile plugin reads it (`tensorboard --logdir OUTPUT_DIR/profile`,
with `pip install tensorboard-plugin-profile`). The main process traces (one process per host under fsdp). The trace
only watches: a traced step is the same graph as any other.
"""

from pathlib import Path

from ..xla import device as devices
from ..xla import profiling, runtime

PROFILE_FOLDER = "profile"


def step_range(option: str) -> tuple[int, int]:
    """--profile_steps (checked by config/checks.py) as (first, last) optimizer step, both traced."""
    first, _, last = option.partition("-")
    return int(first), int(last or first)


class StepProfile:
    def __init__(self, option: str, output_dir, device):
        self.first, self.last = step_range(option)
        self.folder = Path(output_dir) / PROFILE_FOLDER
        self.device = device
        self.traced: list[int] = []
        self._marker = None
        self._running = False

    # The loop's points (callbacks.py).
    def on_fit_start(self, run) -> None:
        self._maybe_start(run.global_step + 1)

    def after_train_step(self, run, batch) -> None:
        if self._running:
            self.traced.append(run.global_step)
            self._marker.__exit__(None, None, None)
            if run.global_step >= self.last:
                self._stop()
                return
            self._mark(run.global_step + 1)
        else:
            self._maybe_start(run.global_step + 1)

    def on_fit_end(self, run) -> None:
        if self._running:  # the run ended (or stopped) inside the range: what was traced is written
            self._marker.__exit__(None, None, None)
            self._stop()

    def _maybe_start(self, next_step: int) -> None:
        if not self.traced and self.first <= next_step <= self.last:
            self.folder.mkdir(parents=True, exist_ok=True)
            profiling.start_trace(str(self.folder))
            self._running = True
            self._mark(next_step)

    def _mark(self, step: int) -> None:
        self._marker = profiling.step_marker(step)
        self._marker.__enter__()

    def _stop(self) -> None:
        # The last traced step has run before the trace is written. A sync advances torch_xla's random seed: put back,
        # so that a traced run draws the same dropout as an untraced one.
        seed = runtime.rng_state()
        devices.sync(self.device, wait=True)
        runtime.set_rng_state(seed)
        profiling.stop_trace()
        self._running = False

    def report(self) -> dict:
        files = sorted(str(path) for path in self.folder.rglob("*.xplane.pb")) if self.folder.exists() else []
        return {"steps": [self.first, self.last], "traced_steps": self.traced, "folder": str(self.folder),
                "trace_files": files}
