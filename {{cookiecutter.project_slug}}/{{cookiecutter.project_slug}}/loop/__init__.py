"""The training loop and its callbacks: one `training_function` for the script and the notebook, for every layout.

  training.py         training_function, and the loop: fit, train_epoch, train_step, evaluate
  preparation.py      what a run trains with: examples, model, loaders, optimizer, schedule, placed by the layout
  callbacks.py        the loop's named points, which the watch and the fault-tolerance features answer
  run_state.py        where the run stands and what it counted
  report.py           the report printed at the end and written to report.json
  host_evaluation.py  the task's metrics of a model on the host's CPU in float32 (what tests compare against)

The loop uses every other folder; none of them imports it.
"""
