"""The Hugging Face hub: whether it answers, and loading from it (or from a local folder laid out like it).

A model, tokenizer or data set that can be read neither locally nor from the hub fails in one line
that names it and the fix, not in a stack trace from deep inside transformers.
"""

import os
from pathlib import Path

import datasets

from ..config.errors import UserError


class ModelUnavailable(UserError, RuntimeError):
    """The model (or its tokenizer) can be read neither from a local folder nor from the hub."""


def hub_reachable(model_name_or_path: str) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        import huggingface_hub

        huggingface_hub.model_info(model_name_or_path, timeout=5)
    except Exception:
        return False
    return True


def looks_local(name: str) -> bool:
    """A path, not a hub id: hub ids are `name` or `owner/name`."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def from_hub_or_folder(load, name: str):
    """`load(name)`, with the usual offline failure said in one line that names the model and the fix."""
    if looks_local(name) and not Path(name).expanduser().is_dir():
        raise ModelUnavailable(
            f"model_name_or_path={name!r}: no such folder (a path, not a hub id `owner/name`): give a folder written "
            "by save_pretrained"
        )
    try:
        return load(name)
    except OSError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelUnavailable(
            f"model_name_or_path={name!r} cannot be loaded ({reason[:160]}): it is not a local folder and the hub "
            "is out of reach (HF_HUB_OFFLINE=1 or no network). Pass --model_name_or_path with a folder written by "
            "save_pretrained, or --demo to train the demo model on your files"
        ) from None


def load_hub_dataset(dataset: str):
    """`glue/mrpc` is the hub's glue data set with its mrpc configuration; a local folder laid out like
    a hub data set (train.csv, validation.csv, ...) loads the same way."""
    if Path(dataset).is_dir():
        return datasets.load_dataset(dataset)
    name, _, subset = dataset.partition("/")
    return datasets.load_dataset(name, subset or None)
