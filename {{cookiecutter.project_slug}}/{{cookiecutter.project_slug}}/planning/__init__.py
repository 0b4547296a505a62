"""Plan a run before renting TPUs: what it needs per chip, whether it fits, how long it takes (plan.py).

  targets.py     the TPU generations' published figures and list prices, and the slices --tpu names
  table.py       plan.py's table: a row per figure, a column per slice
  estimate.py    weights, gradients, optimizer state and activations per device, from the model's config alone
  timing.py      a step's time (the slower of MFU and roofline) and a run's (its evaluations and compiles too)
  start_check.py what a run says of its memory before it compiles, and when it warns or stops there
  rehearsed.py   plan.py --rehearse's answer per recipe and slice, kept for the run to start from

Nothing here imports torch_xla or libtpu: the TPU compiler's answer (--compile) comes through xla/tpu_compile.py.
"""
