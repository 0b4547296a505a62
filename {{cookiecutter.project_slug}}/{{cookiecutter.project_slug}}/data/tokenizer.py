"""The tokenizer a run uses: the model's own (hub or local folder), or the demo's, built from its training texts."""

from collections import Counter
from pathlib import Path

from ..config.groups import DataOptions, ModelOptions
from .formats import DataProblem
from .hub import from_hub_or_folder
from .sources import DEMO_FILES, rows, uses_files

DEMO_VOCAB_SIZE = 800


def train_demo_tokenizer(texts):
    """A WordPiece vocabulary built from the demo's own texts (no download), the same in every process.

    Its words by frequency (ties alphabetical), plus single characters as the pieces of unseen
    words. Not tokenizers' WordPieceTrainer: it breaks ties between equally frequent merges in
    hash order, so each process got another vocabulary, and a resumed run (which rebuilds this
    tokenizer) read its checkpoint's embeddings through the wrong token ids.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts = Counter(
        word for text in texts for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    )
    characters = sorted({char for word in counts for char in word})
    words = sorted(counts, key=lambda word: (-counts[word], word))
    pieces = list(dict.fromkeys([*specials, *characters, *("##" + char for char in characters), *words]))
    vocab = {piece: index for index, piece in enumerate(pieces[:DEMO_VOCAB_SIZE])}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    )


def text_column_texts(row: dict, text_column: str | None) -> list[str]:
    """A row's text in its text column (none if it holds no text)."""
    value = row.get(text_column or "text")
    return [value] if isinstance(value, str) else []


def load_tokenizer(options: DataOptions, model: ModelOptions, demo: bool, row_texts=text_column_texts):
    """The model's tokenizer, or the demo's, built from the texts `row_texts(row, text_column)` finds in each row of the
    training file (the task's: a causal LM's instruction files hold prompts, completions and chat turns)."""
    if demo:
        # Built from the training texts it will read: the shipped demo's, or the user's own file.
        path = Path(options.train_file) if uses_files(options) and options.train_file else DEMO_FILES["train"]
        if not path.is_file():
            raise DataProblem(f"{path}: file not found")
        texts = [text for _, row in rows(path) for text in row_texts(row, options.text_column)]
        return train_demo_tokenizer(texts)
    from transformers import AutoTokenizer

    return from_hub_or_folder(AutoTokenizer.from_pretrained, model.model_name_or_path)
