"""Fault tolerance: checkpoints a kill cannot spoil, resuming, preemption, and the guard that stops a NaN run.

  checkpointing.py        how a checkpoint is written (staged, renamed, LATEST) and found again on every host
  checkpoint_schedule.py  when checkpoints are written and --resume: a callback
  preemption.py           SIGTERM or Ctrl-C stops the run at the next step, with a checkpoint: a callback
  loss_guard.py           non-finite losses counted on the device, read once per epoch: a NaN stops the run
"""
