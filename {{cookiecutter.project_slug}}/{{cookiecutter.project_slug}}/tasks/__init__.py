"""The task: how examples become fixed-shape batches, which model is built, and what evaluation measures.

The training loop (loop/training.py), precision, checkpoints, report, launchers and recompilation watch are the same
for every task; a task module gives them:

  load_examples(config, demo)     -> (data source, tokenizer, train examples, eval examples)
  make_collator(tokenizer, padding, max_seq_length) -> every batch the same shape (padding="fixed")
  train_loader(examples, collator, batch_size, config) -> the loader of the training batches
  train_count(examples, config)   -> the training examples, or None where they have no count (an epoch is --max_steps)
  build_model(config, demo, vocab_size)
  build_shape(config)             -> that model from its config alone, on the meta device (plan.py)
  batch_shapes(model, rows, length) -> {name: (shape, dtype)} of a training batch (plan.py)
  default_train_examples(max_seq_length) -> the default data set's training examples in an epoch (plan.py)
  COUNTS, SCORES, eval_batch(model, batch, valid, metric_dtype) -> {name: tensor} of one eval batch, on the device,
                                     every name of COUNTS and SCORES and no other (loop/evaluation.py checks):
                                     a COUNT is an int64 sum of any fixed shape (the loss in fixed_point's units,
                                     exact in every precision level); a SCORE has a row per example of the batch,
                                     computed by the eval graph (not a batch field as it came), for metrics that are
                                     not sums (kept on the device, read once after the last batch)
  metrics(counts, scores)         -> the eval_* fields of the report, from {name: the sum over the eval set} and
                                     {name: the real examples' rows} (docs/adding-a-metric.md)
  facts(train_examples, collator, config, report) -> task-specific report fields (tokens per second, padding)
  loss_covers(data_format)        -> what the training loss is computed on, in words (console and report)
  after_export(report, tokenizer, data, config) -> adds to the report from the exported model; what to print, or None
  AUTO_MODEL                      -> the transformers Auto class that loads an exported model

`config` is the run's whole TrainConfig: a task joins its data, its model and the run's batches and seed, so it reads
across the groups of config/groups.py; what it hands below, to data/ and models/, is the one group each reads
(`config.data`, `config.model`).

This project was generated for one task: {{ cookiecutter.task }} ({{ cookiecutter.task | replace('-', '_') }}.py).
"""

from . import {{ cookiecutter.task | replace('-', '_') }} as task

__all__ = ["task"]
