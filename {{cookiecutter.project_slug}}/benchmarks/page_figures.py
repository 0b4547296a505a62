"""The pictures of the page's two answers: one horizontal bar panel per answer panel, drawn with matplotlib (Agg).

Each PNG carries the numbers it plots as JSON in its `Description` text chunk, so that a test can hold a committed
picture to the results file without comparing pixels (which move with matplotlib's version).
"""

import json
from pathlib import Path

from .figures import _bar_panel

KEY = "Description"


def plotted(answer) -> str:
    return json.dumps([[title, unit, labels, [round(value, 6) for value in values]]
                       for title, unit, labels, values in answer.panels], sort_keys=True)


def draw(answer, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(answer.panels), figsize=(6 * len(answer.panels), 0.45 * len(answer.rows) + 1.6),
                                squeeze=False)
    for axis, (title, unit, labels, values) in zip(axes[0], answer.panels, strict=True):
        _bar_panel(axis, labels, values, title, unit)
    figure.suptitle(answer.question, fontsize=11)
    figure.tight_layout()
    # No date or software in the file: the same numbers draw the same picture's metadata.
    figure.savefig(path, dpi=90, metadata={KEY: plotted(answer), "Software": None})
    plt.close(figure)
    return path


def read_plotted(path: Path) -> str | None:
    """The numbers a picture says it plots (its Description text chunk)."""
    from PIL import Image

    with Image.open(path) as image:
        return image.text.get(KEY)
