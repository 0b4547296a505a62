"""Write the causal-LM demo's texts (data/demo-lm/), in the style and words of the classification demo's.

The classification demo has 600 sentences: too few tokens for a language model to take more than a handful of
steps per epoch. These are more sentences from the same grammar and vocabulary, drawn with a fixed seed, so
that the files are the same on every run of this script. Usage: python tools/make_lm_demo_text.py

It also writes the instruction demo (instructions-{train,eval}.jsonl): a prompt asking for a positive or negative
review of a product, and a completion that reviews that product in the asked-for tone: learnable (the product and
the tone are in the prompt), and scored on the completion only.
"""

import csv
import json
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
INSTRUCTION_SPLITS = {"train": 1200, "eval": 150}


def sentence(rng: random.Random, noun: str | None = None, words: list[str] | None = None) -> str:
    words = words or rng.choice([GOOD, BAD])
    text = f"The {noun or rng.choice(NOUNS)} is {rng.choice(words)}"
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
    write_instructions(random.Random(20261201))


def instruction(rng: random.Random) -> dict:
    """A request (ending with its separator, a newline) and a review of the product it names, in its tone."""
    noun, tone = rng.choice(NOUNS), rng.choice(["positive", "negative"])
    return {"prompt": f"Write a {tone} review of the {noun}.\n",
            "completion": sentence(rng, noun, GOOD if tone == "positive" else BAD)}


def write_instructions(rng: random.Random) -> None:
    for split, count in INSTRUCTION_SPLITS.items():
        lines = [json.dumps(instruction(rng)) for _ in range(count)]
        (OUT / f"instructions-{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
