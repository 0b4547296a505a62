"""A causal LM's continuations on the device: a static KV cache, two graphs for any number of new tokens.

transformers' generate(cache_implementation="static") compiles a graph for nearly every new token on XLA: its cache
positions and its stopping check are Python numbers read back at each step (20 graphs for 16 new tokens, transformers
5.25 on XLA:CPU). Here every prompt of a file is left-padded to one length and read once (the prefill graph); each
new token then goes through one decode graph whose position is a tensor on the device, so the same graph serves
every step of every batch. A row that has ended (its end-of-text token) goes on producing padding: no step reads
anything back, and a batch's tokens come back to the host once, after its last step.
"""

from typing import NamedTuple

import torch

from ..parallel.fsdp_wrapping import AXIS
from ..xla import device as devices
from ..xla import sharding


def prompt_length(longest: int, new_tokens: int, model_positions: int | None) -> int:
    """One prompt length for the whole file: its longest prompt, rounded up to a multiple of 16 (a few files share a
    graph), cut so that the prompt and its continuation fit the model's positions."""
    length = -(-max(longest, 1) // 16) * 16
    return length if model_positions is None else max(1, min(length, model_positions - new_tokens))


def row_pinning(layout):
    """`pin_rows` for continue_batch in `layout`: under fsdp the state one decode step hands to the next split by rows
    over the chips (the batch's own sharding), as under the data layout's SPMD route (parallel/data_spmd.py); with one
    device per process (data) nothing to pin."""
    def pin_rows(tensors) -> None:
        for tensor in tensors:
            sharding.shard_first_dim(tensor, layout.mesh, AXIS)

    return pin_rows if getattr(layout, "mesh", None) is not None else (lambda tensors: None)


class Decoding(NamedTuple):
    """How a batch is continued: how many new tokens, which token ends a row and which pads it, and the temperature."""
    new_tokens: int
    end_id: int | None
    pad_id: int
    temperature: float = 0.0


def continue_batch(model, model_config, batch: dict, decoding: Decoding, pin_rows=lambda tensors: None) -> torch.Tensor:
    """The `new_tokens` tokens after each left-padded prompt of the batch (its `input_ids` and `attention_mask`)
    ([batch, new_tokens], on the device): greedy when temperature is 0, else drawn from softmax(logits / temperature)
    (the Gumbel-max draw, on the device's random generator). After a row's end token, its tokens are `pad_id`.
    `pin_rows(tensors)`: the layout
    keeps the tensors a step hands to the next split by rows (under SPMD the first step would otherwise hand on the
    shardings it propagated, and the second compile a graph of its own)."""
    from transformers import StaticCache

    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    new_tokens, end_id, pad_id, temperature = decoding
    batch, length = input_ids.shape
    device = input_ids.device
    cache = StaticCache(config=model_config, max_cache_len=length + new_tokens)  # the last step's token too
    # The mask covers the whole cache: the prompt's real tokens now, each new token from its step on.
    mask = torch.cat([attention_mask, attention_mask.new_zeros(batch, new_tokens)], dim=1)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each row's first real token at 0
    step = torch.tensor([length], device=device)  # data, not a constant: one decode graph for every step
    made = torch.full((batch, new_tokens), pad_id, dtype=input_ids.dtype, device=device)
    index = torch.zeros(1, dtype=torch.long, device=device)  # which new token the step makes
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    position = positions[:, -1:]
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                   cache_position=torch.arange(length, device=device), logits_to_keep=1).logits[:, -1]
    carried = lambda: [logits, mask, position, ended, made] + [  # noqa: E731
        tensor for layer in cache.layers for tensor in (layer.keys, layer.values)]
    pin_rows(carried())
    devices.sync(device)  # the prefill graph; what the steps read is now data on the device
    for _ in range(new_tokens):
        chosen = torch.where(ended, torch.full_like(ended, pad_id, dtype=made.dtype), _choose(logits, temperature))
        if end_id is not None:
            ended = ended | (chosen == end_id)
        made = made.index_copy(1, index, chosen[:, None])
        # The last step's forward pass is not needed; it runs anyway, so that every step is the same graph.
        mask = mask.index_fill(1, step, 1)
        position = position + 1
        logits = model(input_ids=chosen[:, None], attention_mask=mask, position_ids=position, cache=cache,
                       use_cache=True, cache_position=step, logits_to_keep=1).logits[:, -1]
        step, index = step + 1, index + 1
        pin_rows(carried())
        devices.sync(device)
    return made


def _choose(logits, temperature: float):
    if temperature == 0:
        return logits.argmax(-1)
    uniform = torch.rand(logits.shape, device=logits.device, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=torch.finfo(torch.float32).tiny)))
    return (logits.float() / temperature + gumbel).argmax(-1)


def until_end(tokens: list[int], end_id: int | None) -> list[int]:
    """A row's tokens up to (not including) its end token."""
    return tokens[:tokens.index(end_id)] if end_id is not None and end_id in tokens else tokens
