"""Refuse bad answers before cookiecutter writes the project.

Answers arrive as JSON data (never as code), are checked field by field, and the
first problem is printed as one line naming the field, the value and what is
allowed. Exiting non-zero makes cookiecutter remove the half-made folder.
Standard library only: this runs in whatever Python cookiecutter runs in.
"""

import ast
import json
import keyword
import math
import re
import sys
import unicodedata

# Names a generated package must not take: they would shadow what it imports.
SHADOWED = {
    "accelerate", "datasets", "tokenizers", "torch", "torch_xla", "transformers",
    "tqdm", "yaml", "numpy", "tests", "test", "src", "benchmarks", "data", "notebooks",
}
FREE_TEXT = ("project_name", "description", "author")
POSITIVE_INTS = (
    "num_labels", "train_batch_size", "eval_batch_size", "max_seq_length",
    "num_epochs", "num_processes",
)
CHOICES = {
    "variants": ("both", "script", "notebook"),
    "mixed_precision": ("bf16", "no"),
    "pure_bf16": ("no", "xla", "downcast", "cast"),
    "parallelism": ("data", "fsdp"),
    "task": ("text-classification", "causal-lm"),
}
BOOLEANS = ("shared_model", "include_benchmarks")


class AnswerError(ValueError):
    def __init__(self, field, value, allowed):
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


def check_free_text(field, value):
    if not isinstance(value, str) or not value.strip():
        raise AnswerError(field, value, "give a non-empty line of text")
    for char in value:
        # Cc: C0/C1 controls (NEL is a newline to Python); Zl/Zp: U+2028/U+2029 line breaks.
        if char != "\t" and unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            raise AnswerError(field, value, "one line of text without control characters")


def check_slug(value):
    allowed = "a Python package name: lower-case letters, digits and _, starting with a letter, not ending with _"
    # The distribution name (pyproject) is the slug with - for _, and must start and end alphanumeric.
    if not isinstance(value, str) or not re.fullmatch(r"[a-z](?:[a-z0-9_]*[a-z0-9])?", value):
        raise AnswerError("project_slug", value, allowed)
    if keyword.iskeyword(value):
        raise AnswerError("project_slug", value, "not a Python keyword")
    if value in SHADOWED or value in sys.stdlib_module_names:
        raise AnswerError("project_slug", value, "a name that does not shadow a module the project imports")


def as_positive_int(field, value):
    text = str(value).strip()
    # No leading zero: the value is pasted into Python, where 016 is a syntax error.
    if not re.fullmatch(r"[1-9][0-9]*", text):
        raise AnswerError(field, value, "a positive whole number")
    return int(text)


def check_learning_rate(value):
    # The value is pasted into Python source, so it must be a Python number literal as typed:
    # float() would also take "１e-5", "010" or "2e-5\n", which break the generated code.
    text = str(value)
    try:
        rate = ast.literal_eval(text) if text == text.strip() else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        rate = None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate > 0):
        raise AnswerError("learning_rate", value, "a positive number such as 2e-5")


def as_bool(field, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "y", "1"):
        return True
    if text in ("false", "no", "n", "0"):
        return False
    raise AnswerError(field, value, "yes or no")


def validate(answers):
    """Raise AnswerError for the first bad answer."""
    for field in FREE_TEXT:
        check_free_text(field, answers[field])
    check_slug(answers["project_slug"])
    check_free_text("model_name_or_path", answers["model_name_or_path"])
    for field in POSITIVE_INTS:
        as_positive_int(field, answers[field])
    check_learning_rate(answers["learning_rate"])
    for field, allowed in CHOICES.items():
        if answers[field] not in allowed:
            raise AnswerError(field, answers[field], "one of " + ", ".join(allowed))
    for field in BOOLEANS:
        as_bool(field, answers[field])
    if answers["pure_bf16"] != "no" and answers["mixed_precision"] != "bf16":
        raise AnswerError("pure_bf16", answers["pure_bf16"], "no, unless mixed_precision=bf16")


def main():
    answers = json.loads(r"""{{ cookiecutter | tojson }}""")
    try:
        validate(answers)
    except AnswerError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
