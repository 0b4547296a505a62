"""What every measurement trains or evaluates on: the project's offline demo data and models.

The data, tokenizer, batching and model code are the project's own; only the
BERT-sized shapes are added here, built from a config so that nothing is downloaded.
"""

import torch
from transformers import BertConfig, BertForSequenceClassification

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.models.modeling import ATTENTION, make_graph_friendly
from {{ cookiecutter.project_slug }}.tasks import task

from .profiles import BERT_VOCAB_SIZE, MODEL_SHAPES, Profile


def config_for(profile: Profile, **overrides) -> TrainConfig:
    """The demo configuration at the profile's sequence length, fp32, nothing written to disk."""
    settings = {
        "demo": True, "max_seq_length": profile.max_seq_length, "mixed_precision": "no", "checkpoint": False,
        "compilation_cache": False, **overrides,
    }
    return TrainConfig(**settings)


def demo_examples(config: TrainConfig):
    """(tokenizer, train examples, eval examples), exactly as training_function prepares them."""
    _, tokenizer, train, evaluation = task.load_examples(config, demo=True)
    return tokenizer, train, evaluation


def build(model_name: str, config: TrainConfig, vocab_size: int):
    """'demo' is the project's own tiny BERT; the other names are BERT shapes built from scratch."""
    if model_name == "demo":
        return make_graph_friendly(task.build_model(config, demo=True, vocab_size=vocab_size))
    torch.manual_seed(config.seed)
    shape = BertConfig(
        vocab_size=max(BERT_VOCAB_SIZE, vocab_size), num_labels=config.num_labels, attn_implementation=ATTENTION,
        **MODEL_SHAPES[model_name],
    )
    return BertForSequenceClassification(shape)


def forever(loader):
    """Batches from a loader, epoch after epoch (itertools.cycle would keep every batch alive)."""
    while True:
        yield from loader
