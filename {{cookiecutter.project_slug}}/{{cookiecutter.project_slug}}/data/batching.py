"""The batching policy: every batch XLA sees has the same shape.

XLA compiles one program per distinct input shape. So, by default:
  - every row has `max_seq_length` tokens (padding="fixed"; the task's collator, tasks/, makes the rows);
  - training drops its ragged last batch;
  - evaluation pads its example list with masked copies up to a whole number of
    full batches on every process, so each real example is counted exactly once
    and the last batch has the same shape as the others.
"""

import math

import torch
from torch.utils.data import DataLoader, Dataset

VALID = "valid"  # 1 for a real example, 0 for a padding copy
LAST_BATCH_POLICIES = ("pad", "drop", "ragged")


class MaskedPadding(Dataset):
    """The eval examples, followed by masked copies of the first one up to `length`."""

    def __init__(self, examples, length: int):
        self.examples, self.length = examples, max(length, len(examples))

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        real = index < len(self.examples)
        row = dict(self.examples[index if real else 0])
        row[VALID] = int(real)
        return row


def padded_eval_length(num_examples: int, batch_size: int, num_processes: int) -> int:
    per_round = batch_size * num_processes
    return math.ceil(num_examples / per_round) * per_round


def train_loader(examples, collator, batch_size: int, seed: int) -> DataLoader:
    """Shuffled, full batches only.

    Prepared by an Accelerator made with `shuffle_config(seed)`, Accelerate replaces the random sampler with its
    SeedableRandomSampler: the order then depends only on (seed, epoch), the same in every process and in a
    resumed run. Unprepared (the benchmarks), the seeded generator alone fixes the order.
    """
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        examples, batch_size=batch_size, shuffle=True, generator=generator, collate_fn=collator, drop_last=True
    )


def micro_batch(batch: dict, count: int, index) -> dict:
    """The `index`-th of `count` micro-batches of one optimizer step's loader batch (gradient accumulation).

    It holds rows index, index + count, index + 2 x count...: strided, not consecutive, because FSDPv2 splits a batch
    over the chips in consecutive blocks of rows, and each block then holds its chip's rows of every micro-batch. A
    micro-batch stays spread over all chips, and taking it moves nothing between them. `index` is a one-element
    tensor on the batch's device, so that every micro-batch is taken by the same graph (an int would be a constant).
    """
    return {name: rows.unflatten(0, (-1, count)).index_select(1, index).select(1, 0) for name, rows in batch.items()}


def shuffle_config(seed: int):
    """Accelerate's data loader settings for `train_loader`: its seedable sampler, seeded with the run's seed."""
    from accelerate import DataLoaderConfiguration

    return DataLoaderConfiguration(use_seedable_sampler=True, data_seed=seed)


def eval_loader(examples, collator, batch_size: int, num_processes: int, last_batch: str = "pad") -> DataLoader:
    """Batches in order; `last_batch` other than "pad" exists to measure what it costs."""
    if last_batch not in LAST_BATCH_POLICIES:
        raise ValueError(f"last_batch={last_batch!r}: must be one of {', '.join(LAST_BATCH_POLICIES)}")
    length = padded_eval_length(len(examples), batch_size, num_processes) if last_batch == "pad" else 0
    return DataLoader(
        MaskedPadding(examples, length), batch_size=batch_size, shuffle=False, collate_fn=collator,
        drop_last=last_batch == "drop",
    )
