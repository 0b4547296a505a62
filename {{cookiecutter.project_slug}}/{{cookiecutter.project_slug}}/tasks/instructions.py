"""Each example of a causal LM as (token ids, labels): every token scored (text), or the answer only (instructions).

The format is recognised from the data's columns (data/instruction_formats.py):
  text               a plain text: every token labelled.
  prompt-completion  the prompt and the completion, each tokenized on its own and joined as written (end the
                     prompt with the separator you want: a newline, a space); the prompt's labels are -100.
  messages           chat turns rendered with the tokenizer's chat template; only the assistant turns are labelled
                     (their text as the template writes it, with its end-of-turn marker), system and user turns not.

Every example ends with the EOS token, labelled, so that the model learns to stop (unless the chat template
already ended the example with EOS). Masked tokens stay in the input: the model reads the prompt, and is not
scored on it. Packing the examples into blocks is the task's (causal_lm.py).
"""

from ..config import DEMO_DATA_DIR
from ..data.formats import TEXT, DataProblem
from ..data.instruction_formats import MESSAGES, PROMPT_COMPLETION

IGNORED = -100  # labels the loss skips: prompts, user turns, padding
# The demo's WordPiece tokenizer (tokenizer.py) has no chat template: a minimal one (data/demo-lm/chat_template.jinja)
# lets it train on `messages`. Each turn is its role's name and its text, ended by [SEP] (the demo's EOS); the
# generation prompt is "assistant". A file of its own: it is Jinja, which cookiecutter would render in this module.
DEMO_CHAT_TEMPLATE_FILE = DEMO_DATA_DIR / "chat_template.jinja"


def demo_chat_template() -> str:
    return DEMO_CHAT_TEMPLATE_FILE.read_text().strip()


def encode(rows, indices, data_format: str, text_column: str, tokenizer, split: str) -> dict:
    """datasets' batched map: a batch of rows (their indices in the split) -> input_ids and labels, one row each."""
    pairs = examples(rows, data_format, text_column, tokenizer, split, first=indices[0] + 1 if indices else 1)
    if data_format == TEXT:  # every token labelled: the labels are the ids, not written twice (data/packing.py)
        return {"input_ids": [ids for ids, _ in pairs]}
    return {"input_ids": [ids for ids, _ in pairs], "labels": [labels for _, labels in pairs]}


def examples(dataset, data_format: str, text_column: str, tokenizer, split: str, first: int = 1) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of every example of rows (a split, or a batch of it whose first row is example `first`), in order."""
    if data_format == PROMPT_COMPLETION:
        # A hub data set's rows are not checked by data.py: a row without a completion has nothing to learn.
        pairs = [(prompt, completion) for prompt, completion in zip(dataset["prompt"], dataset["completion"], strict=True)
                 if isinstance(prompt, str) and isinstance(completion, str) and completion.strip()]
        return prompt_completion_examples([pair[0] for pair in pairs], [pair[1] for pair in pairs], tokenizer)
    if data_format == MESSAGES:
        return chat_examples(dataset["messages"], tokenizer, split, first)
    return text_examples([text for text in dataset[text_column] if text.strip()], tokenizer)


def text_examples(texts, tokenizer) -> list[tuple[list[int], list[int]]]:
    """Each text's ids followed by EOS, no other special tokens; every token labelled."""
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    rows = [row + [tokenizer.eos_token_id] for row in ids]
    return [(row, list(row)) for row in rows]


def prompt_completion_examples(prompts, completions, tokenizer) -> list[tuple[list[int], list[int]]]:
    """prompt + completion + EOS; the prompt's labels -100.

    Tokenized apart, not as one string: the boundary between what is masked and what is scored is then exact
    (a joint tokenization can merge the prompt's last characters with the completion's first).
    """
    if not prompts:
        return []
    prompt_ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [(prompt + completion + [eos], [IGNORED] * len(prompt) + completion + [eos])
            for prompt, completion in zip(prompt_ids, completion_ids, strict=True)]


def chat_examples(conversations, tokenizer, split: str, first: int = 1) -> list[tuple[list[int], list[int]]]:
    """Each conversation (the first is example `first`) as the chat template renders it; the assistant turns' tokens
    labelled, the others -100."""
    if not getattr(tokenizer, "chat_template", None):
        raise DataProblem(
            "column 'messages': the tokenizer has no chat template to render chat turns with; use 'prompt' and "
            "'completion' columns instead, or a model whose tokenizer has a chat template"
        )
    eos, result = tokenizer.eos_token_id, []
    for number, messages in enumerate(conversations, start=first):
        segments = chat_segments(messages, tokenizer, f"{split} example {number}")
        pieces = tokenizer([text for text, _ in segments], add_special_tokens=False)["input_ids"]
        ids, labels = [], []
        for (_, scored), piece in zip(segments, pieces, strict=True):
            ids += piece
            labels += piece if scored else [IGNORED] * len(piece)
        if not ids or ids[-1] != eos:
            ids, labels = ids + [eos], labels + [eos]
        result.append((ids, labels))
    return result


def chat_segments(messages, tokenizer, where: str) -> list[tuple[str, bool]]:
    """The rendered conversation cut into (text, is an assistant turn) pieces, in order.

    The template is rendered up to each assistant turn (with the generation prompt: what the model is given at
    inference) and up to its end; the text between the two is the assistant's. That needs a template that renders
    turn by turn, each rendering a prefix of the next; templates that rewrite earlier turns are refused.
    (transformers' `return_assistant_tokens_mask` needs generation markers in the template, which few have.)
    """
    # `datasets` gives every turn every key seen in the file, None where a turn has none: keep the ones it has.
    turns = [{key: value for key, value in turn.items() if value is not None} for turn in messages]

    def render(upto: int, generation_prompt: bool) -> str:
        if upto == 0:
            return ""
        try:
            return tokenizer.apply_chat_template(turns[:upto], tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as error:  # jinja2's TemplateError, or the template's own raise_exception
            raise DataProblem(f"{where}: column 'messages': the chat template refused it ({error})") from None

    segments, done = [], ""
    for index, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        before, after = render(index, True), render(index + 1, False)
        if not (before.startswith(done) and after.startswith(before)):
            raise DataProblem(
                f"{where}: column 'messages': the chat template does not render turn by turn (a rendering up to a "
                "turn is not the start of the next one), so the assistant turns cannot be told apart; use 'prompt' "
                "and 'completion' columns"
            )
        segments += [(before[len(done):], False), (after[len(before):], True)]
        done = after
    whole = render(len(turns), False)
    if not whole.startswith(done):
        raise DataProblem(f"{where}: column 'messages': the chat template does not render turn by turn")
    return [*segments, (whole[len(done):], False)]
