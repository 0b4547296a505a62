"""The model: a pretrained checkpoint, or the demo's tiny BERT built from a config.

Building happens on the host (CPU) only. In a notebook this runs once in the
parent process and the model is handed to every forked worker.
"""

import torch
from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

from .config import TrainConfig

DEMO_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
# SDPA attention asks the host whether a padding mask is all ones (`mask.all()`), which on
# XLA forces a device round trip every step; eager attention builds the mask in the graph.
ATTENTION = "eager"


def use_graph_friendly_attention(model):
    """Switch a model built elsewhere (a notebook cell) to the attention this project relies on."""
    if getattr(model.config, "_attn_implementation", ATTENTION) != ATTENTION and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ATTENTION)
    return model


def build_model(config: TrainConfig, demo: bool, vocab_size: int | None = None):
    torch.manual_seed(config.seed)
    if demo:
        if vocab_size is None:
            raise ValueError("vocab_size: the demo model needs its tokenizer's vocabulary size")
        bert = BertConfig(
            vocab_size=vocab_size, max_position_embeddings=max(config.max_seq_length, 8), num_labels=config.num_labels,
            attn_implementation=ATTENTION, **DEMO_SHAPE,
        )
        return BertForSequenceClassification(bert)
    return AutoModelForSequenceClassification.from_pretrained(
        config.model_name_or_path, num_labels=config.num_labels, attn_implementation=ATTENTION
    )
