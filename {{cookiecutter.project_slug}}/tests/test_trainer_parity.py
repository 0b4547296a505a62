"""The loop trains as transformers' Trainer does: given the same starting weights and the same batches in the same
order, with dropout off and in float32, the project's default step gives the Trainer's loss at every step and its
weights after them.

Seeds are taken out of the comparison: both start from one save_pretrained folder (a tiny model of the default
architecture with its head, so that nothing is initialised at random), both read the batches of the task's own
examples and collator, in the order of Accelerate's seedable sampler at the same seed (the Trainer's default). What
is left is the recipe: the loss and its reduction, clipping, AdamW, which weights are decayed, the schedule. The
weight decay is set high, so that a weight decayed in one loop and not in the other (a LayerNorm's scale, a bias: the
Trainer decays neither) moves by about learning rate x decay x steps = 5e-3, against the 5e-7 the two loops' float32
arithmetic differs by (measured on the classifier).

The Trainer runs on the host's CPU with torch_xla hidden (its reference arithmetic); the project on its XLA device in
the bake's layout (fsdp: 4 SPMD devices, a quarter of each batch on each, weights and AdamW's state sharded).
"""

import json

import pytest
from comparing import float32_apart
from conftest import NO_XLA_PRELUDE, PARALLELISM, TASK, child_env, python_code, python_command, run, spmd_env
from model_matrix import LENGTH, demo_tokenizer, write_model

from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES

STEPS = 10
BATCH = 16  # one optimizer step's examples: under fsdp split over DEVICES chips, the same 16 rows in the same order
DEVICES = 4 if PARALLELISM == "fsdp" else 1
LEARNING_RATE = 1e-3  # each weight moves by up to about 1e-2 in 10 steps
WEIGHT_DECAY = 0.5
ARCHITECTURE = "Qwen2" if TASK == "causal-lm" else "BERT"  # the default model's architecture
# Two programs in float32: within float32's bound for the 10 steps (tests/comparing.py), the losses relative, step for
# step, and every element of every weight after the last step absolute (they are about 1 at most).
LOSS_TOLERANCE = float32_apart(STEPS)
WEIGHT_TOLERANCE = float32_apart(STEPS)

TRAINER = NO_XLA_PRELUDE + """
import json, sys
from transformers import Trainer, TrainingArguments
from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.tasks import task

config, output = TrainConfig(**json.loads(sys.argv[1])), sys.argv[2]
_, tokenizer, train_examples, _ = task.load_examples(config, demo=False)
losses = []

class Recording(Trainer):
    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        losses.append(loss.item())
        return loss

arguments = TrainingArguments(
    output_dir=output, learning_rate=config.learning_rate, weight_decay=config.weight_decay,
    per_device_train_batch_size=config.train_batch_size, max_steps=config.max_steps, seed=config.seed,
    data_seed=config.seed, lr_scheduler_type=config.lr_scheduler_type, max_grad_norm=config.max_grad_norm,
    save_strategy="no", report_to=[], use_cpu=True)
trainer = Recording(model=task.AUTO_MODEL.from_pretrained(config.model_name_or_path), args=arguments,
                    train_dataset=train_examples,
                    data_collator=task.make_collator(tokenizer, config.padding, config.max_seq_length))
trainer.train()
trainer.save_model(output)
print(json.dumps(losses))
"""


def weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.compares("float32", "losses and weights of 10 steps: the project's loop on XLA:CPU against "
                      "transformers' Trainer on the host")
def test_the_loop_gives_the_trainer_s_losses_and_weights_step_for_step(tmp_path):
    model = write_model(tmp_path / "model", ARCHITECTURE, demo_tokenizer(), dropout=False)
    settings = {
        "demo": False, "model_name_or_path": str(model), "dataset": "files", "train_file": str(DEMO_FILES["train"]),
        "eval_file": str(DEMO_FILES["eval"]), "max_seq_length": LENGTH, "train_batch_size": BATCH,
        "max_steps": STEPS, "learning_rate": LEARNING_RATE, "weight_decay": WEIGHT_DECAY,
    }
    trainer = json.loads(run(python_code(TRAINER, json.dumps(settings), str(tmp_path / "trainer"))).stdout.splitlines()[-1])

    flags = [f"--{name}={str(value).lower() if isinstance(value, bool) else value}" for name, value in settings.items()
             if name != "train_batch_size"]  # per chip here
    run(python_command(*flags, "--train_batch_size", str(BATCH // DEVICES), "--mixed_precision", "no",
                       "--logging_steps", "1", "--output_dir", str(tmp_path / "project"), "--checkpoint", "false",
                       *(["--samples", "0"] if TASK == "causal-lm" else [])),
        env=spmd_env(DEVICES) if DEVICES > 1 else child_env())
    logs = [json.loads(line) for line in (tmp_path / "project" / "metrics.jsonl").read_text().splitlines()]
    project = [log["loss"] for log in logs if "loss" in log]

    assert len(project) == len(trainer) == STEPS
    assert project == pytest.approx(trainer, rel=LOSS_TOLERANCE), (project, trainer)
    ours, theirs = weights(tmp_path / "project" / "model"), weights(tmp_path / "trainer")
    assert ours.keys() == theirs.keys()
    start = weights(model)
    differences = {name: (ours[name] - theirs[name]).abs().max().item() for name in ours}
    moved = max((theirs[name] - start[name]).abs().max().item() for name in theirs if name in start)
    assert moved > 10 * WEIGHT_TOLERANCE  # the comparison means something: the Trainer's weights moved
    assert max(differences.values()) <= WEIGHT_TOLERANCE, sorted(differences.items(), key=lambda item: -item[1])[:5]
