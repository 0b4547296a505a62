"""Which checkpoint `--resume` continues from: the newest intact one, trained with settings this run may continue.

Every checkpoint records its run's settings (SETTINGS). A checkpoint whose files differ from its manifest is named
and passed over for the next newest; one trained with settings that change shapes or what the weights mean is
refused in one line. Settings a user may change on purpose are the business of resume_changes.py.
"""

import json
from pathlib import Path

from ..launch.main_process import main_process_decides
from . import checkpointing, manifest
from .checkpointing import LATEST, SETTINGS, CheckpointProblem

# A resume with another value of one of these would load tensors of other shapes or meaning (or fail to load them).
REFUSED = {
    "task": "the task", "parallelism": "the checkpoint's layout (its files)",
    "checkpoint_files": "how the data layout wrote it (one process per host over SPMD with the JAX step, or one per chip)", "demo": "the model",
    "model_name_or_path": "the model", "max_seq_length": "the position embeddings' use and the data's rows",
    "num_labels": "the classifier's head", "lora_r": "the adapters' shapes", "lora_alpha": "the adapters' scale",
    "lora_target_modules": "which layers have adapters", "stored_dtype": "the weights' type",
    "optim": "the optimizer's state", "kahan_summation": "the optimizer's state", "streaming": "the data's state",
}
# Never compared: where this run writes, and how it was asked to start.
NOT_SETTINGS = ("output_dir", "report", "resume", "overwrite_output_dir")


class ResumeRefused(CheckpointProblem):
    """No checkpoint this run can continue; every process raises it together."""

    every_process = True


def settings_of(options: dict, facts: dict) -> dict:
    """What a checkpoint records of its run: every option (`options`: TrainConfig's flat names, as asdict gives them,
    the names a checkpoint written before the options were grouped holds too), and `facts` the options leave open."""
    kept = {name: value for name, value in options.items() if name not in NOT_SETTINGS}
    return json.loads(json.dumps({**kept, **facts}, default=str))  # plain JSON values, as read back


def read_settings(folder: Path) -> dict:
    return json.loads((folder / SETTINGS).read_text())


def candidates(output_dir, say) -> list[str]:
    """The checkpoints under output_dir, LATEST's first, then by how far into the run they reach (main process)."""
    root = checkpointing.checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    folders = [path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")]
    pointer = root / LATEST
    named = pointer.read_text().strip() if pointer.is_file() else None
    if folders and not named:
        say(f"resume: {pointer} is {'empty' if pointer.is_file() else 'missing'}; looking at every checkpoint there")
    elif named and not (root / named).is_dir():
        say(f"resume: {pointer} names {named!r}, which is not there; looking at every checkpoint there")

    def reached(path: Path) -> int:
        try:
            return checkpointing.read_progress(path)["global_step"]
        except (OSError, ValueError, KeyError, TypeError):
            return -1  # damaged: the manifest's check names why

    ordered = sorted(folders, key=lambda path: (path.name == named, reached(path)), reverse=True)
    return [path.name for path in ordered]


def choose(accelerator, output_dir, settings_now: dict, say) -> Path | None:
    """The checkpoint to resume, checked on every process; None when output_dir holds none (start from scratch)."""
    names = main_process_decides(accelerator, lambda: candidates(output_dir, say))
    passed_over = []
    for name in names:
        folder = checkpointing.checkpoint_root(output_dir) / name
        checkpointing.check_seen_everywhere(accelerator, folder, "resume: the checkpoint")
        problem = manifest.damage(accelerator, folder)
        if problem:
            passed_over.append(f"{name}: {problem}")
            say(f"resume: checkpoint {folder} is damaged: {problem}; trying an older one")
            continue
        check_settings(folder, read_settings(folder), settings_now)
        return folder
    if passed_over:
        raise ResumeRefused(
            f"resume: no intact checkpoint in {checkpointing.checkpoint_root(output_dir)} "
            f"({'; '.join(passed_over)}): --overwrite_output_dir starts over"
        )
    return None


def check_settings(folder: Path, recorded: dict, now: dict) -> None:
    """Refuse, in one line, a resume whose settings would load other shapes or meanings than the checkpoint's."""
    for name, meaning in REFUSED.items():
        if name in recorded and recorded.get(name) != now.get(name):
            raise ResumeRefused(
                f"resume: {name} was {recorded[name]!r} in checkpoint {folder}, this run has {now.get(name)!r} "
                f"({meaning}): resume with the same value, or start over in another --output_dir"
            )

