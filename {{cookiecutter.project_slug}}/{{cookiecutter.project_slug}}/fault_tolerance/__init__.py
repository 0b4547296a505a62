"""Fault tolerance: checkpoints a kill cannot spoil, resuming, preemption, and the guard that stops a NaN run.

  checkpointing.py        how a checkpoint is written (staged, renamed, LATEST) and found again on every host
  checkpoint_schedule.py  when checkpoints are written and --resume: a callback
  output_folder.py        a used --output_dir refused unless resumed or overwritten; a refused run's new one removed
  preemption.py           SIGTERM or Ctrl-C stops the run at the next step, with a checkpoint: a callback
  loss_guard.py           non-finite losses counted on the device, read once per epoch: a NaN stops the run
"""
