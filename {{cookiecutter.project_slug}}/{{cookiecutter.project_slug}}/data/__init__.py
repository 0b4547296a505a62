"""Where examples come from and how they reach the model: data sets and files, their formats, the tokenizer, batches.

  sources.py    the shipped offline demo, local CSV/JSON lines files (checked row by row), or a hub data set
  formats.py    what every task's examples are held in, and the checks of their rows
  tokenizer.py  the model's tokenizer, or the demo's, trained on its own texts (no download)
  batching.py   fixed-shape batching, so that XLA compiles a handful of graphs instead of one per batch
  hub.py        the Hugging Face hub: whether it answers, loading models and data sets
"""
