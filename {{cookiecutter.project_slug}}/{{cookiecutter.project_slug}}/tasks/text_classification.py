"""Text classification: a label per text (or text pair), measured by accuracy, macro-F1, each label's precision,
recall and F1, and the confusion matrix, all from whole-number counts summed on the device; and by ROC AUC, from each
example's label probabilities, gathered once after the last eval batch.

Each text is tokenized alone and padded to `max_seq_length` (padding="fixed"): one batch shape.
"""

import torch
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
)

from ..config import ATTENTION, PADDING_MODES, TrainConfig
from ..data import batching, preparation
from ..data.formats import TaskChecks, no_column
from ..data.hub import from_hub_or_folder
from ..data.sources import load_text_data
from ..data.tokenizer import load_tokenizer
from ..precision.fixed_point import finite_to_fixed, from_fixed
from .roc_auc import roc_auc

NAME = "text-classification"
DEMO_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}
# What evaluation sums on the device, all whole numbers (the loss in fixed point; the examples whose loss was not finite,
# which stop the run: fault_tolerance/loss_guard.py; the confusion matrix, num_labels x num_labels, true by predicted).
COUNTS = ("correct", "counted", "loss", "non_finite", "confusion")
# What evaluation keeps per example for the metrics that are not sums (ROC AUC): each label's probability, the label.
SCORES = ("probabilities", "labels")
AUTO_MODEL = AutoModelForSequenceClassification  # what loads an exported model (outputs/model)


def tokenize(split, tokenizer, text_column, text_pair_column, label_column, max_seq_length, workers=None):
    """Token ids without padding (the collator pads) plus integer labels (none without a `label_column`: predict.py's
    input): datasets' batched map, cached on disk and run in `workers` processes when the split is large enough
    (data/preparation.py)."""

    def encode(rows):
        pairs = rows[text_pair_column] if text_pair_column else None
        encoded = tokenizer(rows[text_column], pairs, truncation=True, max_length=max_seq_length)
        if label_column:
            encoded["labels"] = [int(float(label)) for label in rows[label_column]]
        return encoded

    return split.map(encode, batched=True, remove_columns=split.column_names, desc="tokenizing",
                     num_proc=preparation.processes(workers, len(split)))


def label_checks(label_column: str, num_labels: int) -> TaskChecks:
    """Refuse labels that cannot be learned or evaluated: a file's row as written, a hub split's column."""

    def not_a_label(label) -> str:
        return f"label {label!r} is not a whole number in 0..{num_labels - 1} (num_labels={num_labels})"

    def row(values: dict) -> str | None:
        if label_column not in values:
            return no_column(label_column, values)
        label = values[label_column]
        try:
            valid = float(label) == int(float(label)) and 0 <= int(float(label)) < num_labels
        except (TypeError, ValueError):
            valid = False
        return None if valid else not_a_label(label)

    def split(rows) -> str | None:
        if label_column not in rows.column_names:
            return no_column(label_column, rows.column_names)
        labels = rows[label_column]
        bad = [label for label in labels if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < num_labels]
        if not bad:
            return None
        if all(label == -1 for label in bad):
            return (
                f"{len(bad)} of {len(labels)} rows have no label (-1, as in GLUE's test splits): evaluate on a "
                "split with labels, or use --dataset files with your own --eval_file"
            )
        return not_a_label(bad[0])

    return TaskChecks(row, split)


def loss_covers(data_format: str) -> str:
    """What the training loss is computed on (said at the start and in the report): one label per text."""
    return "the loss covers each text's label"


def load_examples(config: TrainConfig, demo: bool):
    """(data, tokenizer, train examples, eval examples), tokenized without padding (the collator pads)."""
    data = load_text_data(config.data, demo, config.text_pair_column, label_checks(config.label_column, config.num_labels))
    tokenizer = load_tokenizer(config.data, config.model, demo)
    encode = (tokenizer, data.text_column, data.text_pair_column, config.label_column, config.max_seq_length,
              config.preprocessing_num_workers)
    train_examples = tokenize(data.train, *encode)
    eval_examples = tokenize(data.eval, *encode)
    if config.max_train_examples:
        train_examples = train_examples.select(range(min(config.max_train_examples, len(train_examples))))
    return data, tokenizer, train_examples, eval_examples


def train_loader(examples, collator, batch_size: int, config: TrainConfig):
    """The shuffled train loader (data/batching.py); the layout gives each process or host its share."""
    return batching.train_loader(examples, collator, batch_size, config.seed)


def train_count(examples, config: TrainConfig) -> int:
    return len(examples)


def after_export(report: dict, tokenizer, data, config: TrainConfig) -> None:
    """Nothing after the export: the report is whole, nothing more to print."""


def make_collator(tokenizer, padding: str, max_seq_length: int):
    """fixed: every row padded to max_seq_length (one shape); buckets: to a multiple of a quarter of it (a few);
    dynamic: to the longest row of the batch (a new shape almost every batch: kept only to measure its cost)."""
    if padding == "fixed":
        return DataCollatorWithPadding(tokenizer, padding="max_length", max_length=max_seq_length)
    if padding == "buckets":
        return DataCollatorWithPadding(tokenizer, padding="longest", pad_to_multiple_of=max(1, max_seq_length // 4))
    if padding == "dynamic":
        return DataCollatorWithPadding(tokenizer, padding="longest")
    raise ValueError(f"padding={padding!r}: must be one of {', '.join(PADDING_MODES)}")


def build_model(config: TrainConfig, demo: bool, vocab_size: int | None = None):
    """The demo's tiny BERT built from a config (no download), or a pretrained checkpoint with a new head."""
    torch.manual_seed(config.seed)
    if demo:
        if vocab_size is None:
            raise ValueError("vocab_size: the demo model needs its tokenizer's vocabulary size")
        bert = BertConfig(
            vocab_size=vocab_size, max_position_embeddings=max(config.max_seq_length, 8), num_labels=config.num_labels,
            attn_implementation=ATTENTION, **DEMO_SHAPE,
        )
        return BertForSequenceClassification(bert)
    return from_hub_or_folder(
        lambda name: AutoModelForSequenceClassification.from_pretrained(
            name, num_labels=config.num_labels, attn_implementation=ATTENTION
        ),
        config.model_name_or_path,
    )


def build_shape(config: TrainConfig):
    """The model build_model would load, from its config alone and on the meta device: no weight is read (plan.py)."""
    model_config = from_hub_or_folder(
        lambda name: AutoConfig.from_pretrained(name, num_labels=config.num_labels), config.model_name_or_path
    )
    with torch.device("meta"):
        return AUTO_MODEL.from_config(model_config, attn_implementation=ATTENTION)


def batch_shapes(model, rows: int, length: int) -> dict:
    """{name: (shape, dtype)} of a training batch of `rows` texts (the collator's, padding="fixed"); token type ids
    where the model has a table of them (BERT's tokenizer gives them)."""
    shapes = {"input_ids": ((rows, length), torch.int64), "attention_mask": ((rows, length), torch.int64),
              "labels": ((rows,), torch.int64)}
    if getattr(model.config, "type_vocab_size", 0) > 1:
        shapes["token_type_ids"] = ((rows, length), torch.int64)
    return shapes


def default_train_examples(max_seq_length: int) -> int:
    """The default data set's training examples in an epoch (GLUE MRPC's train split): plan.py's run length."""
    return 3668


def default_eval_examples(max_seq_length: int) -> int:
    """The default data set's evaluation examples (GLUE MRPC's validation split): plan.py's evaluation time."""
    return 408


def eval_batch(model, batch, valid, metric_dtype) -> dict:
    """One batch's COUNTS (int64 sums) and SCORES (a row per example), by name, on the device. Each example's loss
    is computed in `metric_dtype` and rounded to fixed_point's units before the sum, so the sum is exact in every
    precision level. Masked copies (valid 0) count for nothing; evaluation drops their scores. The confusion matrix
    is a sum of one-hot outer products: the same shapes at every batch, so no graph of its own. The labels are kept
    as int32, a value the graph computes (a SCORE must be: tasks/__init__.py)."""
    logits = model(**batch).logits
    labels, predicted = batch["labels"], logits.argmax(dim=-1)
    fixed, non_finite = finite_to_fixed(
        torch.nn.functional.cross_entropy(logits.to(metric_dtype), labels, reduction="none"))
    classes = logits.shape[-1]
    truth = torch.nn.functional.one_hot(labels, classes) * valid.unsqueeze(1)
    confusion = (truth.unsqueeze(2) * torch.nn.functional.one_hot(predicted, classes).unsqueeze(1)).sum(dim=0)
    return {"correct": ((predicted == labels).long() * valid).sum(), "counted": valid.sum(),
            "loss": (fixed * valid).sum(), "non_finite": (non_finite * valid).sum(), "confusion": confusion.long(),
            "probabilities": logits.to(metric_dtype).softmax(dim=-1), "labels": labels.to(torch.int32)}


def metrics(counts: dict, scores: dict) -> dict:
    """The eval metrics from the summed counts and the real examples' scores, by name. Per label: precision, recall
    and F1 as scikit-learn's (a label never predicted, or never present, scores 0); macro-F1 their mean."""
    confusion, counted = counts["confusion"], counts["counted"]  # the confusion's rows: true labels
    found = {"eval_accuracy": counts["correct"] / counted if counted else None,
             "eval_loss": from_fixed(counts["loss"]) / counted if counted else None}
    f1s = []
    for label in range(len(confusion)):
        right = confusion[label][label]
        predicted, present = sum(row[label] for row in confusion), sum(confusion[label])
        found[f"eval_precision_{label}"] = right / predicted if predicted else 0.0
        found[f"eval_recall_{label}"] = right / present if present else 0.0
        f1s.append(2 * right / (predicted + present) if predicted + present else 0.0)
        found[f"eval_f1_{label}"] = f1s[-1]
    found["eval_macro_f1"] = sum(f1s) / len(f1s)
    found["eval_roc_auc"] = roc_auc(scores["labels"], scores["probabilities"])
    return {**found, "eval_examples_counted": counted, "eval_non_finite_losses": counts["non_finite"],
            "eval_confusion_matrix": confusion}


def summary(evaluation: dict) -> str:
    return (f"eval loss {evaluation['eval_loss']:.4f}, eval accuracy {evaluation['eval_accuracy']:.4f}, "
            f"macro-F1 {evaluation['eval_macro_f1']:.4f}")


def facts(train_examples, collator, config: TrainConfig, report: dict) -> dict:
    """Nothing beyond the loop's own fields for this task."""
    return {}
