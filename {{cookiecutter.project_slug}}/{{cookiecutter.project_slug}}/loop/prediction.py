"""Predictions over a file with an exported model, what every task's loop shares (predict.py; the task's own loop is
a module of its own beside this one): the rows gathered in input order, the graphs counted after the first batch,
and the predictions written whole or not at all.
"""

import csv
import json
import os
from pathlib import Path

from ..config import UserError
from ..launch import processes
from ..watch.compilations import compile_counts

ROW = "row"  # each example's line among the input's examples, from 0: what puts the gathered rows back in order


class PredictionProblem(UserError, ValueError):
    """Bad input to predict.py: said in one line, exit status 2, no output file."""


def in_input_order(accelerator, mine: list[tuple[int, object]], count: int) -> list[tuple[int, object]]:
    """Every process's (row, result) pairs, gathered and sorted by row; each of the `count` input rows exactly once."""
    gathered = sorted((pair for share in processes.gather_objects(accelerator, mine) for pair in share),
                      key=lambda pair: pair[0])
    if [row for row, _ in gathered] != list(range(count)):
        raise RuntimeError(f"prediction: {len(gathered)} rows gathered for {count} inputs, not each once")
    return gathered


def graphs_since(first_batch_graphs: int | None) -> int | None:
    """Graphs compiled after the first batch's (None where nothing counts them: no XLA)."""
    last = compile_counts().compilations
    return None if last is None or first_batch_graphs is None else last - first_batch_graphs


def write_atomically(path, predictions: list[dict]) -> str:
    """CSV or JSON lines by the path's suffix, written beside it and renamed into place: never a partial file."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "w", encoding="utf-8", newline="") as file:
            if path.suffix == ".csv":
                writer = csv.DictWriter(file, fieldnames=list(predictions[0]) if predictions else [ROW])
                writer.writeheader()
                writer.writerows(predictions)
            else:
                file.writelines(json.dumps(prediction, ensure_ascii=False) + "\n" for prediction in predictions)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return str(path)
