"""Causal language-model fine-tuning on packed blocks of exactly `max_seq_length` tokens, measured by perplexity.

Packing (padding="fixed"): every text is tokenized, followed by the EOS token, joined, and cut into blocks of
max_seq_length tokens: one shape, no padding. Training keeps whole blocks only; evaluation keeps the last, short
one too, padded and masked (labels -100), so that every eval token is predicted exactly once. (A block's first
token has no prediction in it: the counted tokens are each block's length minus one.)

padding="longest" (one text per row, all padded to the longest row) and "dynamic" (one text per row, padded per
batch) exist to measure what packing saves.

Instruction data (prompt/completion or chat messages, tasks/instructions.py) is packed the same way, with its
labels: -100 on prompts and user turns, so only the answers (and each example's EOS) are scored. Each example's
tokens are in the stream once; a block may start or end inside an example.
"""

import math

import datasets
import torch
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoModelForCausalLM, DataCollatorForSeq2Seq, LlamaConfig, LlamaForCausalLM

from ..config import ATTENTION, PADDING_MODES, TrainConfig
from ..data import batching, instruction_formats, packing, preparation, streaming
from ..data.formats import TEXT
from ..data.hub import from_hub_or_folder
from ..data.instruction_formats import MESSAGES, PROMPT_COMPLETION, row_texts
from ..data.packing import labels_of
from ..data.tokenizer import load_tokenizer
from ..precision.fixed_point import finite_to_fixed, from_fixed
from . import instructions
from .instructions import IGNORED
from .samples import after_export  # noqa: F401  (the task's step after the export: tasks/__init__.py)

NAME = "causal-lm"
DEMO_SHAPE = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
# What evaluation sums on the device, all whole numbers (the loss in fixed point; the tokens whose loss was not finite,
# which stop the run: fault_tolerance/loss_guard.py).
COUNTS = ("blocks", "tokens", "loss", "non_finite")
SCORES = ()  # nothing kept per example: every metric here is a sum
AUTO_MODEL = AutoModelForCausalLM  # what loads an exported model (outputs/model)


TOKENIZED = datasets.Features({name: datasets.Sequence(datasets.Value("int32")) for name in ("input_ids", "labels")})
TEXT_TOKENIZED = datasets.Features({"input_ids": TOKENIZED["input_ids"]})  # plain text: its labels are its ids


def tokenized(split, data, tokenizer, name: str, workers: int | None) -> datasets.Dataset:
    """Each example's (input_ids, labels) (tasks/instructions.py), by datasets' batched map: cached, in workers."""
    return split.map(
        instructions.encode, batched=True, with_indices=True, remove_columns=split.column_names,
        features=TEXT_TOKENIZED if data.format == TEXT else TOKENIZED,
        batch_size=preparation.ROWS_PER_BATCH, writer_batch_size=preparation.ROWS_PER_BATCH,
        num_proc=preparation.processes(workers, len(split)), desc=f"tokenizing {name}",
        fn_kwargs={"data_format": data.format, "text_column": data.text_column, "tokenizer": tokenizer, "split": name},
    )


def pack_examples(examples, length: int, pad_id: int, train: bool) -> datasets.Dataset:
    """(ids, labels) pairs held in memory, packed as load_examples packs a split (data/packing.py)."""
    columns = {"input_ids": [ids for ids, _ in examples], "labels": [labels for _, labels in examples]}
    return packing.pack(datasets.Dataset.from_dict(columns, features=TOKENIZED), length, pad_id, train, None)


def load_examples(config: TrainConfig, demo: bool):
    """(data, tokenizer, train examples, eval examples): packed blocks, or one text per row for the other paddings."""
    # --streaming: the train split a stream, read as it trains (data/streaming.py); the eval set as without it.
    data = (streaming if config.streaming else instruction_formats).load_data(config.data, demo)
    tokenizer = load_tokenizer(config.data, config.model, demo, row_texts)  # an instruction file's prompts, completions and turns too
    if tokenizer.eos_token is None:  # the demo's WordPiece tokenizer: its separator ends a text
        tokenizer.eos_token = tokenizer.sep_token
    if tokenizer.pad_token is None:  # Llama-style tokenizers have none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token
    if demo and not tokenizer.chat_template:  # so that the demo model can train on chat `messages` too
        tokenizer.chat_template = instructions.demo_chat_template()
    workers = config.preprocessing_num_workers
    if config.streaming:  # padding "fixed" (config/checks.py)
        evaluation = packing.pack(tokenized(data.eval, data, tokenizer, "eval", workers), config.max_seq_length,
                                  tokenizer.pad_token_id, False, workers)
        return data, tokenizer, streaming.blocks(data, tokenizer, config.max_seq_length, instructions.encode), evaluation
    examples = {split: tokenized(getattr(data, split), data, tokenizer, split, workers) for split in ("train", "eval")}
    length = config.max_seq_length
    if config.padding == "fixed":  # packed in Arrow, a batch of blocks at a time (data/packing.py)
        train, evaluation = (packing.pack(examples[split], length, tokenizer.pad_token_id, split == "train", workers)
                             for split in ("train", "eval"))
    else:
        # One example per row, cut to max_seq_length; a training row left with no scored token (a prompt longer
        # than max_seq_length) is dropped, for the same reason as packing drops such blocks. (These two layouts
        # exist to measure what packing saves, on the demo's size: their rows are Python lists.)
        rows = {split: [(ids[:length], labels[:length])
                        for ids, labels in zip(split_rows["input_ids"], split_rows[labels_of(split_rows)], strict=True)]
                for split, split_rows in examples.items()}
        rows["train"] = [row for row in rows["train"] if packing.scores_something(row[1])]
        if config.padding == "longest":  # every row as long as the longest one: one shape, no packing
            length = max(len(ids) for split_rows in rows.values() for ids, _ in split_rows)
            train, evaluation = (datasets.Dataset.from_dict(packing.padded(rows[split], length, tokenizer.pad_token_id))
                                 for split in ("train", "eval"))
        else:  # dynamic: the collator pads each batch to its longest row (labels with -100)
            train, evaluation = (
                datasets.Dataset.from_dict({"input_ids": [ids for ids, _ in rows[split]],
                                            "labels": [labels for _, labels in rows[split]]})
                for split in ("train", "eval")
            )
    if config.max_train_examples:
        train = train.select(range(min(config.max_train_examples, len(train))))
    return data, tokenizer, train, evaluation


def loss_covers(data_format: str) -> str:
    """What the training loss is computed on, for a data format (said at the start and in the report)."""
    return {
        TEXT: "the loss covers every token",
        PROMPT_COMPLETION: "instruction data, the loss covers the completions and each example's EOS (prompts masked)",
        MESSAGES: "chat data, the loss covers the assistant turns and each example's EOS (other turns masked)",
    }[data_format]


def train_loader(examples, collator, batch_size: int, config: TrainConfig):
    """Shuffled (data/batching.py), or with --streaming the stream's, each reader its own part (parallel/streams.py)."""
    if config.streaming:
        return streaming.StreamLoader(examples, collator, batch_size, config.max_steps)
    return batching.train_loader(examples, collator, batch_size, config.seed)


def train_count(examples, config: TrainConfig) -> int | None:
    return None if config.streaming else len(examples)  # a stream has no count


def make_collator(tokenizer, padding: str, max_seq_length: int):
    """Rows of one length are stacked as they are (fixed, longest); dynamic pads each batch to its longest row."""
    if padding not in PADDING_MODES:
        raise ValueError(f"padding={padding!r}: must be one of {', '.join(PADDING_MODES)}")
    # transformers' collator that pads labels with -100 (the masked ones) as well as the ids and the mask.
    return DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=IGNORED)


def build_model(config: TrainConfig, demo: bool, vocab_size: int | None = None):
    """The demo's tiny Llama built from a config (no download), or a pretrained causal language model."""
    torch.manual_seed(config.seed)
    if demo:
        if vocab_size is None:
            raise ValueError("vocab_size: the demo model needs its tokenizer's vocabulary size")
        llama = LlamaConfig(
            vocab_size=vocab_size, max_position_embeddings=max(config.max_seq_length, 8), attn_implementation=ATTENTION,
            **DEMO_SHAPE,
        )
        return LlamaForCausalLM(llama)
    return from_hub_or_folder(
        lambda name: AutoModelForCausalLM.from_pretrained(name, attn_implementation=ATTENTION), config.model_name_or_path
    )


def build_shape(config: TrainConfig):
    """The model build_model would load, from its config alone and on the meta device: no weight is read (plan.py)."""
    model_config = from_hub_or_folder(AutoConfig.from_pretrained, config.model_name_or_path)
    with torch.device("meta"):
        return AUTO_MODEL.from_config(model_config, attn_implementation=ATTENTION)


def batch_shapes(model, rows: int, length: int) -> dict:
    """{name: (shape, dtype)} of a training batch of `rows` packed blocks (padding="fixed")."""
    return {name: ((rows, length), torch.int64) for name in ("input_ids", "attention_mask", "labels")}


def default_train_examples(max_seq_length: int) -> int:
    """plan.py's epoch: WikiText-2's train split, about 2.4 million tokens in GPT-2's BPE (run_clm: 2,318 x 1,024)."""
    return 2_400_000 // max_seq_length


def default_eval_examples(max_seq_length: int) -> int:
    return max(1, 246_000 // max_seq_length)  # run_clm: 240 blocks of 1,024


def eval_batch(model, batch, valid, metric_dtype) -> dict:
    """One batch's COUNTS by name, on the device: blocks, predicted tokens, their loss in fixed point, non-finite ones.
    Each token's loss is rounded to fixed_point's units before the sum, so that the sum over thousands of
    tokens is exact in every precision level (under XLA_USE_BF16 a float sum would move in steps of tens of
    nats). Masked copies (valid 0) count for nothing.
    """
    labels = batch["labels"]
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    predicted, targets = logits[:, :-1], labels[:, 1:]  # position t predicts token t + 1
    per_token = torch.nn.functional.cross_entropy(
        predicted.reshape(-1, predicted.shape[-1]).to(metric_dtype), targets.reshape(-1),
        ignore_index=IGNORED, reduction="none",
    ).view(targets.shape)
    counted = (targets != IGNORED).long() * valid.unsqueeze(1)
    fixed, non_finite = finite_to_fixed(per_token)
    return {"blocks": valid.sum(), "tokens": counted.sum(), "loss": (fixed * counted).sum(),
            "non_finite": (non_finite * counted).sum()}


def metrics(counts: dict, scores: dict) -> dict:  # the sums by name (no scores)
    tokens = counts["tokens"]
    loss = from_fixed(counts["loss"]) / tokens if tokens else None
    return {
        "eval_loss": loss,
        "eval_perplexity": math.exp(loss) if loss is not None else None,
        "eval_examples_counted": counts["blocks"],
        "eval_tokens_counted": tokens,
        "eval_non_finite_losses": counts["non_finite"],
    }


def summary(evaluation: dict) -> str:
    return f"eval loss {evaluation['eval_loss']:.4f}, eval perplexity {evaluation['eval_perplexity']:.2f}"


def facts(train_examples, collator, config: TrainConfig, report: dict) -> dict:
    """Padding in the training batches (collated on the host, in data set order) and the steady tokens per second.

    The tokens per second are computed: the run's measured steady examples per second times the real
    (unpadded) tokens per example.
    """
    per_second = report.get("steady_examples_per_second")
    if config.streaming:  # never iterated here: every block is max_seq_length real tokens
        return {"train_padding_fraction": 0.0,
                "steady_tokens_per_second": per_second * config.max_seq_length if per_second else None}
    real = total = rows = 0
    for batch in DataLoader(train_examples, batch_size=report["train_batch"]["per_chip"], collate_fn=collator, drop_last=True):
        real += int(batch["attention_mask"].sum())
        total += batch["attention_mask"].numel()
        rows += batch["attention_mask"].shape[0]
    return {
        "train_padding_fraction": 1 - real / total if total else None,
        "steady_tokens_per_second": per_second * real / rows if per_second and rows else None,
    }
