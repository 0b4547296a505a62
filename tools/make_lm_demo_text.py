"""Write the causal-LM demo's texts (data/demo-lm/), in the style and words of the classification demo's.

The classification demo has 600 sentences: too few tokens for a language model to take more than a handful of
steps per epoch. These are more sentences from the same grammar and vocabulary, drawn with a fixed seed, so
that the files are the same on every run of this script. Usage: python tools/make_lm_demo_text.py
"""

import csv
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "{{cookiecutter.project_slug}}" / "data" / "demo-lm"
NOUNS = ["laptop", "speaker", "camera", "blender", "tablet", "keyboard", "battery", "fan", "printer", "router",
         "screen", "app", "mouse", "kettle", "charger", "headphones", "case", "manual", "delivery", "support team"]
GOOD = ["brilliant", "excellent", "solid", "reliable", "pleasant", "wonderful", "superb", "great", "fantastic",
        "impressive"]
BAD = ["annoying", "disappointing", "awful", "flimsy", "useless", "terrible", "poor", "faulty", "horrible", "broken"]
PHRASES = ["out of the box", "when travelling", "as far as I can tell", "compared with my old one", "once again",
           "in my small flat", "during the long weekend", "for the price", "to be honest", "at work",
           "on rainy days", "after two weeks of daily use", "according to my brother"]
SPLITS = {"train": 2400, "eval": 300}


def sentence(rng: random.Random) -> str:
    words = rng.choice([GOOD, BAD])
    text = f"The {rng.choice(NOUNS)} is {rng.choice(words)}"
    for phrase in rng.sample(PHRASES, rng.randint(1, 3)):
        text += f" {phrase}"
    if rng.random() < 0.6:
        text += f" and the {rng.choice(NOUNS)} is {rng.choice(words)}"
    return text + rng.choice([".", "!"])


def main() -> None:
    rng = random.Random(20261130)
    OUT.mkdir(parents=True, exist_ok=True)
    for split, count in SPLITS.items():
        with (OUT / f"{split}.csv").open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text"])
            writer.writerows([sentence(rng)] for _ in range(count))


if __name__ == "__main__":
    main()
