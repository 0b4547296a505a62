"""The project's graph watch on a loop that is not the project's: Accelerate's example, transformers' Trainer, TRL.

Every task's loop comparison (measure_recompilation.py, measure_lm_loops.py) watches its baselines the same way, so
that their recompilations are counted and explained exactly as the project's own are.
"""

from pathlib import Path

from {{ cookiecutter.project_slug }}.watch import compile_analysis, graph_watch


def baseline_watch(output_dir: str, padding: str):
    """The project's graph watch for a loop that is not the project's (it never stops one)."""
    analysis = compile_analysis.enable_analysis(Path(output_dir) / "xla-compilations", "baseline")
    return graph_watch.GraphWatch(padding, None, lambda message: None, analysis)


def recording(collate, seen: dict):
    """`collate`, keeping the last batch it made in seen["batch"] for the watch (the loader prefetches: the batch
    shapes it reports may lead by a batch or two)."""

    def collate_and_keep(rows):
        seen["batch"] = collate(rows)
        return seen["batch"]

    return collate_and_keep


def trainer_callback(watch, seen: dict):
    """A transformers TrainerCallback that calls the watch at the points the project's loop does; it keeps the last
    evaluation's metrics in seen["metrics"]."""
    from transformers import TrainerCallback

    class Watch(TrainerCallback):
        epoch = 0
        eval_step = 0

        def on_train_begin(self, *args, **kwargs):
            watch.start()

        def on_epoch_begin(self, args, state, control, **kwargs):
            self.epoch = round(state.epoch or 0)

        def on_step_end(self, args, state, control, **kwargs):
            watch.check("train", self.epoch, state.global_step, seen.get("batch"))

        def on_prediction_step(self, args, state, control, **kwargs):
            self.eval_step += 1
            watch.check("eval", self.epoch, self.eval_step, seen.get("batch"))

        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            seen["metrics"] = metrics or {}
            self.eval_step = 0
            watch.check("other", self.epoch)
            watch.warmed_up("eval")
            watch.warmed_up("other")

    return Watch()
