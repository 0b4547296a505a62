"""The training loop and its callbacks: one `training_function` for the script and the notebook, for every layout.

  training.py         training_function: builds a run and hands it to the loop
  fit.py              the one loop: Loop.fit (epochs), train_epoch, evaluate_now
  context.py          RunContext: what every part of a run is handed (accelerator, layout, options, precision)
  step.py             train_step: one optimizer step (its micro-batches, clipping, the update)
  evaluation.py       evaluate: the task's metrics summed exactly on the device
  preparation.py      what a run trains with: examples, model, loaders, optimizer, schedule, placed by the layout
  optimizers.py       the optimizer --optim names (AdamW, Adafactor; optimi's AdamW with Kahan summation)
  callbacks.py        the loop's named points, which the watch and the fault-tolerance features answer
  run_state.py        where the run stands and what it counted
  export.py           the trained model written with save_pretrained (peft's adapter folder under LoRA)
  model_card.py       the export's README.md: base model, data, settings, precision, graphs, eval metrics
  report.py           the report printed at the end and written to report.json
  host_evaluation.py  the task's metrics of a model on the host's CPU in float32 (what tests compare against)
  prediction.py       predict.py's loop: an exported model over a file, each row once, in input order

The loop uses every other folder; none of them imports it.
"""
