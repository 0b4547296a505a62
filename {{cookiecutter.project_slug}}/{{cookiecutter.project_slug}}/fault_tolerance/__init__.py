"""Fault tolerance: checkpoints a kill cannot spoil, resuming, preemption, and the guard that stops a NaN run.

  checkpointing.py        how a checkpoint is written (staged, manifest last, renamed, LATEST), seen on every host
  safe_loading.py         what a run reads back is unpickled as tensors and plain data only, or refused by name
  checkpoint_schedule.py  when checkpoints are written and --resume: a callback
  manifest.py             every file's size and sha256, written last, checked before a resume loads anything
  resume.py               which checkpoint --resume continues: the newest intact one, with settings it may continue
  resume_changes.py       settings changed on purpose at a resume: applied to the run and its schedule, each said
  output_folder.py        a used --output_dir refused unless resumed or overwritten; a refused run's new one removed
  run_lock.py             one run per output_dir: a lock its first process holds, refreshed, taken over when stale
  preemption.py           SIGTERM or Ctrl-C stops the run at the next step, with a checkpoint: a callback
  loss_guard.py           non-finite losses counted on the device, read once per epoch: a NaN stops the run
"""
