"""Precision: which level a run trains in, the proof it took effect, and what bf16 costs and how sums stay exact.

  levels.py        the level asked for, how it is applied, and the lowered graph that proves it
  bf16_updates.py  AdamW updates that round away in bf16 weights, and the Kahan-summed optimizer that keeps them
  fixed_point.py   loss sums as int64 whole numbers of 2**-24 nats, exact in every level
"""
