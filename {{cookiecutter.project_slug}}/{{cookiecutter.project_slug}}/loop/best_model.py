"""The best evaluation of a run and the stop when evaluations no longer improve: a callback of the loop (callbacks.py).

Every evaluation is judged by --metric_for_best_model (transformers' Trainer's meaning): better is strictly greater or
strictly lower as the metric goes, a tie is no improvement. The best so far and the evaluations since it live in the
run's state (run_state.py), so every checkpoint holds them and a resumed run goes on counting. The decision is made
from the metrics the evaluation already read to the host once: nothing is added to the training step or its graph.

  --load_best_model_at_end   each better evaluation's weights are written to OUTPUT_DIR/best-model (one file holding
                             the weights and the evaluation, replaced in one rename); the export (export.py) writes
                             those instead of the last. Without the flag nothing is written: a default run does no more.
  --early_stopping_patience  after that many evaluations in a row without improvement the run ends at the loop's next
                             boundary, as transformers' EarlyStoppingCallback does; the report says where and why.
"""

import os
import time
from pathlib import Path

import torch

from ..config.defaults import BEST_METRICS
from ..fault_tolerance import safe_loading
from ..launch import processes

KEPT_FOLDER = "best-model"  # in OUTPUT_DIR (fault_tolerance/output_folder.py removes it with the run's results)
KEPT_FILE = "weights.pt"


def metric_key(name: str) -> str:
    """The report's name of --metric_for_best_model: eval_loss for loss (transformers adds the prefix too)."""
    return name if name.startswith("eval_") else f"eval_{name}"


def greater_is_better(name: str) -> bool:
    return BEST_METRICS[metric_key(name).removeprefix("eval_")]


def improves(value: float | None, best: float | None, greater: bool) -> bool:
    """Strictly better than the best so far (any value is, before the first). A metric an evaluation could not
    compute (None: ROC AUC on an eval set of one label) improves nothing."""
    return value is not None and (best is None or (value > best if greater else value < best))


def judged(best: dict, metric: str, greater: bool, evaluation: dict, position: tuple[int, int]) -> dict:
    """The best record after `evaluation` at `position` (epoch, global step): this one's if it improves, else the old
    one with one more evaluation since."""
    value = evaluation[metric]
    epoch, global_step = position
    if improves(value, best.get("value"), greater):
        return {"metric": metric, "value": value, "epoch": epoch, "global_step": global_step, "evaluations_since": 0,
                "evaluation": dict(evaluation)}
    return {**best, "evaluations_since": best.get("evaluations_since", 0) + 1}


def out_of_patience(best: dict, patience: int | None) -> bool:
    return bool(patience) and best.get("evaluations_since", 0) >= patience


def kept_path(output_dir) -> Path:
    return Path(output_dir) / KEPT_FOLDER / KEPT_FILE


def read_kept(output_dir) -> dict | None:
    """{"weights", "best"} as the run kept them, None if none is there: read as tensors and plain data only, a file
    holding more refused in one line (fault_tolerance/safe_loading.py)."""
    path = kept_path(output_dir)
    return safe_loading.load_plain(path, map_location="cpu") if path.is_file() else None


def where(best: dict) -> str:
    return f"epoch {best['epoch']}, step {best['global_step']}, {best['metric']} {best['value']:.4f}"


class BestModel:
    """Judges each evaluation; keeps the best one's weights (--load_best_model_at_end); stops the run (--early_stopping_
    patience). Answers on_fit_start after the checkpoints' (the resumed record is known) and after_evaluation."""

    def __init__(self, accelerator, layout, config, say):
        self.accelerator, self.layout, self.say = accelerator, layout, say
        self.metric, self.greater = metric_key(config.metric_for_best_model), greater_is_better(config.metric_for_best_model)
        self.keep, self.patience, self.output_dir = config.load_best_model_at_end, config.early_stopping_patience, config.output_dir
        self.kept_seconds, self.kept_writes = 0.0, 0
        self.stop = None  # where and why the run stopped early

    def on_fit_start(self, run) -> None:
        if run.best and run.best.get("metric") != self.metric:
            self.say(f"best model: the checkpoint judged by {run.best.get('metric')}, this run by {self.metric}: "
                     "its best evaluation is chosen from the next evaluation on")
            run.best = {}
        if out_of_patience(run.best, self.patience):  # resumed from the checkpoint written where it stopped
            self._stopping(run, run.epoch + (1 if run.resumed_step else 0), "a resume of a run that had stopped")

    def after_evaluation(self, run) -> None:
        if run.evaluation.get(self.metric) is None:
            return  # nothing counted (an empty eval set): nothing to compare
        run.best = judged(run.best, self.metric, self.greater, run.evaluation, (run.epoch + 1, run.global_step))
        if run.best["evaluations_since"] == 0 and self.keep:
            self._keep(run.best)
        if out_of_patience(run.best, self.patience):
            self._stopping(run, run.epoch + 1)

    def _keep(self, best: dict) -> None:
        """Every process takes part (a sharded model's weights are put together on the main process's host)."""
        started = time.perf_counter()
        scratch = Path(self.output_dir) / f".{KEPT_FOLDER}-shards"
        weights = self.layout.host_state_dict(self.accelerator, scratch=scratch)
        if processes.is_main(self.accelerator):
            path = kept_path(self.output_dir)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            torch.save({"weights": weights, "best": best}, partial)
            os.replace(partial, path)  # a kill leaves the previous best whole
        processes.barrier(self.accelerator)
        self.kept_writes += 1
        self.kept_seconds += time.perf_counter() - started

    def _stopping(self, run, epoch: int, what: str = "") -> None:
        best, at = run.best, f"epoch {epoch}, step {run.global_step}" + (f" ({what})" if what else "")
        why = (f"{best['metric']} did not improve on {best['value']:.4f} (epoch {best['epoch']}, step "
               f"{best['global_step']}) in {best['evaluations_since']} evaluations (--early_stopping_patience "
               f"{self.patience})")
        self.stop = {"epoch": epoch, "global_step": run.global_step, "why": why}
        run.stop_reason = f"early stopping at {at}: {why}"
        self.say(run.stop_reason)

    def report(self, run) -> dict:
        best = {key: value for key, value in run.best.items() if key != "evaluation"} or None
        return {
            "best_model": {"metric": self.metric, "greater_is_better": self.greater, "best": best,
                           "load_best_model_at_end": self.keep, "kept_writes": self.kept_writes,
                           "kept_seconds": self.kept_seconds},
            "early_stopping": None if not self.patience else {
                "patience": self.patience, "stopped": self.stop is not None, **(self.stop or {}),
                "evaluations_without_improvement": run.best.get("evaluations_since", 0)},
        }
