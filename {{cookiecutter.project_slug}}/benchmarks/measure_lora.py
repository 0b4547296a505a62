"""Full fine-tuning or LoRA on the demo, measured inside its own (forked) process through the project's own loop.

`training.training_function` with the demo's model and data, float32, no checkpoints or export; the numbers are
its report's: the optimizer state one device holds, the steady step time (median between steps that compiled
nothing) and the graphs compiled. Any task: nothing here is the classifier's or the language model's own.
"""

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.loop import training

from .profiles import Profile

LORA_R = 8
EPOCHS = 1
# 10 steps at the demo's global batch of 16: the graph watch times the steps after its warm-up (the first 4), which
# compile nothing; one epoch keeps the row quick on a CPU (compiling its 2 graphs is most of its time).
TRAIN_EXAMPLES = 160


def demo_run(profile: Profile, output_dir: str, lora_r: int | None) -> dict:
    config = TrainConfig(
        demo=True, max_seq_length=profile.max_seq_length, num_epochs=EPOCHS, max_train_examples=TRAIN_EXAMPLES,
        mixed_precision="no", checkpoint=False, export=False, output_dir=output_dir, lora_r=lora_r,
    )
    report = training.training_function(config=config)
    return {
        "device": report["device"], "compilations": report["xla_compilations"],
        "recompilations": report["recompilations"], "steady_step_s": report["steady_step_seconds"],
        "optimizer_bytes_per_device": report["parameters"]["optimizer_state_bytes_per_device"],
        "trainable_parameters": report["parameters"]["trainable"], "total_parameters": report["parameters"]["total"],
        "eval_loss": report["eval_loss"],
    }
