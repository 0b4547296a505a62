"""Which evaluation is the best and when patience runs out (loop/best_model.py), as transformers' Trainer decides:
strictly better by --metric_for_best_model, a tie is no improvement, the run stops after N evaluations in a row without
one. Fast: plain functions and the run's state, no device (the runs are test_training.py's)."""

import pytest

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.loop import best_model
from {{ cookiecutter.project_slug }}.loop.run_state import RunState


def judge_all(values, metric="eval_loss", patience=None):
    """(best record, index of the evaluation where patience ran out or None) over evaluations of `metric` values."""
    best, greater = {}, best_model.greater_is_better(metric)
    for index, value in enumerate(values):
        best = best_model.judged(best, metric, greater, {metric: value}, (1, index + 1))
        if best_model.out_of_patience(best, patience):
            return best, index
    return best, None


def test_a_loss_is_better_lower_and_a_tie_is_no_improvement():
    best, stopped = judge_all([0.7, 0.6, 0.6, 0.65, 0.61], patience=3)
    assert (best["value"], best["global_step"], best["evaluations_since"], stopped) == (0.6, 2, 3, 4)
    assert best["evaluation"] == {"eval_loss": 0.6}


def test_patience_counts_evaluations_in_a_row_and_an_improvement_starts_again():
    assert judge_all([0.7, 0.8, 0.6, 0.9, 0.9], patience=2)[1] == 4
    assert judge_all([0.7, 0.8, 0.6, 0.9, 0.5], patience=2)[1] is None
    assert judge_all([0.7, 0.8], patience=1)[1] == 1
    assert judge_all([0.7, 0.8, 0.9], patience=None)[1] is None  # no patience: never stops


def test_the_metric_is_named_as_transformers_names_it_and_goes_its_way():
    assert best_model.metric_key("loss") == best_model.metric_key("eval_loss") == "eval_loss"
{%- if cookiecutter.task == "causal-lm" %}
    assert not best_model.greater_is_better("perplexity")  # transformers' "ends with loss" rule would say higher
    assert judge_all([30.0, 25.0, 28.0], metric="eval_perplexity")[0]["value"] == 25.0
{%- else %}
    assert best_model.greater_is_better("accuracy") and best_model.greater_is_better("eval_macro_f1")
    best, stopped = judge_all([0.5, 0.7, 0.7, 0.65], metric="eval_accuracy", patience=2)
    assert (best["value"], best["global_step"], stopped) == (0.7, 2, 3)
    # ROC AUC is None where it cannot be computed (one label in the eval set): such an evaluation improves nothing.
    best, stopped = judge_all([None, 0.8, None, 0.9], metric="eval_roc_auc", patience=2)
    assert (best["value"], best["global_step"], stopped) == (0.9, 4, None)
{%- endif %}
    assert not best_model.greater_is_better("loss")


def test_the_best_record_survives_a_checkpoint_and_an_earlier_checkpoint_has_none():
    run = RunState(steps_per_epoch=6, examples_per_step=16, num_epochs=3, last_step=18)
    run.epoch, run.step, run.global_step = 1, 2, 8
    run.best = judge_all([0.7, 0.6, 0.8], patience=2)[0]
    resumed = RunState(steps_per_epoch=6, examples_per_step=16, num_epochs=3, last_step=18)
    resumed.resume_at(run.progress(loss_so_far=5))
    assert resumed.best == run.best and resumed.global_step == 8
    earlier = {"epochs_done": 1, "epoch_step": 0, "global_step": 6, "loss_sum": 0}  # written before the best record
    resumed = RunState(steps_per_epoch=6, examples_per_step=16, num_epochs=3, last_step=18)
    resumed.resume_at(earlier)
    assert resumed.best == {} and resumed.global_step == 6


class Said(list):
    def __call__(self, line):
        self.append(line)


@pytest.mark.parametrize(("patience", "stops"), [(2, True), (3, False)])
def test_a_resumed_run_that_had_run_out_of_patience_stops_before_training(patience, stops):
    """The checkpoint written where the run stopped holds the evaluations since the best: a resume with the same
    patience ends at once; a larger one trains on (as a resumed Trainer with its callback's counter would)."""
    config = TrainConfig(eval_steps=2, early_stopping_patience=patience)
    said = Said()
    callback = best_model.BestModel(None, None, config, said)
    run = RunState(steps_per_epoch=6, examples_per_step=16, num_epochs=3, last_step=18)
    run.resume_at({"epochs_done": 2, "epoch_step": 0, "global_step": 12, "loss_sum": 0,
                   "best": judge_all([0.7, 0.6, 0.8, 0.9])[0]})
    callback.on_fit_start(run)
    assert (run.stop_reason is not None) is stops
    if stops:
        assert said == ["early stopping at epoch 2, step 12 (a resume of a run that had stopped): eval_loss did not "
                        "improve on 0.6000 (epoch 1, step 2) in 2 evaluations (--early_stopping_patience 2)"]
        assert callback.report(run)["early_stopping"]["stopped"]


def test_another_metric_on_resume_starts_the_best_afresh():
    config = TrainConfig(metric_for_best_model="{{ 'perplexity' if cookiecutter.task == 'causal-lm' else 'accuracy' }}")
    said = Said()
    run = RunState(steps_per_epoch=6, examples_per_step=16, num_epochs=3, last_step=18)
    run.best = judge_all([0.7, 0.6])[0]
    best_model.BestModel(None, None, config, said).on_fit_start(run)
    assert run.best == {} and "judged by eval_loss" in said[0]
