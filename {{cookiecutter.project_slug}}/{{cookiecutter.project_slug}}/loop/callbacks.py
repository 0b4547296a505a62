"""The named points of the training loop, and the features that answer them.

The loop (fit.py) only trains and evaluates. Everything that watches or interrupts it is an object
that answers some of these points, holding its own state, in the style of Lightning's callbacks:

  - checkpoints (fault_tolerance/checkpoint_schedule.py): resume at the start, save when due and after every epoch;
  - the graph watch (watch/graph_watch.py): every compiled graph, and each recompilation explained;
  - preemption (fault_tolerance/preemption.py): on SIGTERM or Ctrl-C, save at the next step boundary and stop;
  - the metrics log (watch/metrics_log.py): every --logging_steps, numbers read on a thread of its own;
  - the step profile (watch/step_profile.py): torch_xla's trace of the --profile_steps.
  - the best model (loop/best_model.py): judges each evaluation, keeps the best one's weights, stops early.

A feature defines only the points it answers, with these names and arguments; it does not import this module
(the machinery never imports the loop), so `Callback` below is the points' reference, not a base class.

They are called in the order they are given (training.py gives them in that order), so that the watch
sees the graphs a checkpoint compiled and a preempted run stops after its checkpoint is written. Each
point gets the run's state (run_state.py); the points in the order a run reaches them:

  on_fit_start(run)                  once, before the first epoch
  before_sync(run)                   a training step is traced, about to be cut and run (the first one compiles)
  after_train_step(run, batch)       a training step ran and was synced (the loop's thread reads nothing from the device)
  at_step_boundary(run)              between two optimizer steps: a checkpoint may be due, a stop asked for
                                     (after it the loop ends when a callback set run.stop_reason: early stopping)
  after_eval_step(run, step, batch)  an evaluation step ran and was synced
  after_evaluation(run)              the epoch's evaluation is over and summed
  at_epoch_end(run)                  the epoch is over (its line printed)
  on_fit_end(run)                    always, also when the run stops early
"""


class Callback:
    """Every point, doing nothing: the names and arguments a feature answers (a point it lacks is skipped)."""

    def on_fit_start(self, run) -> None:
        pass

    def before_sync(self, run) -> None:
        pass

    def after_train_step(self, run, batch) -> None:
        pass

    def at_step_boundary(self, run) -> None:
        pass

    def after_eval_step(self, run, step: int, batch) -> None:
        pass

    def after_evaluation(self, run) -> None:
        pass

    def at_epoch_end(self, run) -> None:
        pass

    def on_fit_end(self, run) -> None:
        pass


class Callbacks:
    """Several callbacks called as one, in order: `callbacks.at_epoch_end(run)` calls each one's."""

    def __init__(self, *callbacks: Callback):
        self.callbacks = [callback for callback in callbacks if callback is not None]

    def __getattr__(self, point: str):
        if point not in POINTS:
            raise AttributeError(point)

        def call(*args) -> None:
            for callback in self.callbacks:
                answer = getattr(callback, point, None)
                if answer is not None:
                    answer(*args)

        return call


POINTS = tuple(name for name in vars(Callback) if not name.startswith("_"))
