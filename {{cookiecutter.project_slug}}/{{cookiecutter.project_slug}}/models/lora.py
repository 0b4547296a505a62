"""LoRA fine-tuning (peft): low-rank adapters trained on a frozen base, and what a run keeps and exports of them.

With `--lora_r N` the task's model is wrapped by peft before the layout places it: every targeted linear layer
gains two small trainable matrices (A: r x in, B: out x r, B starting at zero), every base weight is frozen, and a
sequence classifier's new head stays trainable (peft's SEQ_CLS task type lists it in `modules_to_save`). The
optimizer is given the trainable parameters only, so its state exists for them only; checkpoints hold them only
(the frozen base comes back from where it came from: model_name_or_path, or the demo's seeded build).

The export (`export_adapters`) rebuilds the trained model on the host and writes OUTPUT_DIR/model as peft's
adapter folder (adapter_config.json + adapter_model.safetensors), with `--merge_lora` also OUTPUT_DIR/model-merged
(the adapters merged into the base: a plain model that `from_pretrained` loads without peft). A base built from a
config (the demo) has no name to load it by, so it is written to OUTPUT_DIR/model-base and the adapter's
base_model_name_or_path names that folder (absolute path).
"""

import copy
from pathlib import Path

from ..config import ConfigError
from ..config.groups import ModelOptions
from ..tasks import task

MERGED = "model-merged"  # beside OUTPUT_DIR/model
BASE = "model-base"  # beside OUTPUT_DIR/model, for a base that cannot be loaded by name


def enabled(options: ModelOptions) -> bool:
    return options.lora_r is not None


def lora_config(options: ModelOptions, target_modules=None):
    """peft's LoraConfig from the run's flags; unnamed targets are peft's default for the model type."""
    from peft import LoraConfig, TaskType

    targets = options.lora_target_modules
    return LoraConfig(
        # SEQ_CLS keeps the classifier head trainable and saved (modules_to_save: classifier / score).
        task_type=TaskType.CAUSAL_LM if task.NAME == "causal-lm" else TaskType.SEQ_CLS,
        r=options.lora_r,
        lora_alpha=options.resolved_lora_alpha,
        lora_dropout=options.resolved_lora_dropout,
        target_modules=[name.strip() for name in targets.split(",") if name.strip()] if targets else target_modules,
    )


def add_adapters(model, options: ModelOptions):
    """The model wrapped by peft (base frozen, adapters and head trainable), or the model itself without lora_r."""
    if not enabled(options):
        return model
    from peft import get_peft_model

    try:
        return get_peft_model(model, lora_config(options))
    except ValueError as error:
        message = str(error)
        model_type = getattr(model.config, "model_type", None)
        if "specify `target_modules`" in message:
            raise ConfigError(
                f"lora_target_modules: peft has no default for model type {model_type!r}; name the layers to adapt "
                f"(comma-separated), e.g. {', '.join(_linear_names(model)[:6])}"
            ) from error
        # peft 0.21 says it two ways: "Target modules ... not found in the base model" (a ValueError) and, for
        # names that match nothing, its NoMatchingPeftModuleError ("No modules were targeted for adaptation").
        if "not found in the base model" in message or type(error).__name__ == "NoMatchingPeftModuleError":
            raise ConfigError(
                f"lora_target_modules={options.lora_target_modules!r}: no such layer in {type(model).__name__}; "
                f"its linear layers include {', '.join(_linear_names(model)[:8])}"
            ) from error
        raise


def frozen_to_bf16(model) -> str:
    """Hold every frozen weight of the model in bf16, in place (the trainable ones stay float32, and so does their
    optimizer state): the line a run says of it. config/groups.py (ModelOptions.frozen_in_bf16) says when."""
    import torch

    frozen = [parameter for parameter in model.parameters() if not parameter.requires_grad]
    saved = sum(parameter.numel() * (parameter.element_size() - 2) for parameter in frozen)
    for parameter in frozen:  # .data: a parameter stays the same object (peft's wrappers and tied weights hold it)
        parameter.data = parameter.data.to(torch.bfloat16)
    less = f"{saved / 2 ** 30:.2f} GiB" if saved >= 2 ** 30 else f"{saved / 2 ** 20:.1f} MiB"
    return f"lora: the frozen base ({len(frozen)} tensors) held in bf16, {less} less (--lora_frozen_float32 keeps float32)"


def _linear_names(model) -> list[str]:
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)})


def parameter_counts(model) -> dict:
    """Trainable and total parameter elements (global shapes: under FSDPv2 the logical tensor, not a shard).

    With a classifier's LoRA the total counts the head twice: peft keeps the frozen original beside its trainable copy.
    """
    trainable = total = 0
    for parameter in model.parameters():  # each shared (tied) parameter once
        total += parameter.numel()
        trainable += parameter.numel() if parameter.requires_grad else 0
    return {"trainable": trainable, "total": total, "trainable_fraction": trainable / total if total else 0.0}


def trainable_state(model, state: dict) -> dict:
    """The entries of `state` (the model's state dict, same names) that training changes: what a checkpoint keeps."""
    names = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    return {name: tensor for name, tensor in state.items() if name in names}


def report(options: ModelOptions, model) -> dict | None:
    """The report's `lora` field: the adapters' settings as peft resolved them (targets included)."""
    if not enabled(options):
        return None
    resolved = model.peft_config["default"]
    return {
        "r": resolved.r, "alpha": resolved.lora_alpha, "dropout": resolved.lora_dropout,
        "target_modules": sorted(resolved.target_modules), "modules_to_save": sorted(resolved.modules_to_save or []),
        "merge_on_export": options.merge_lora,
        **{f"{which}_dtype": str(next((p.dtype for p in model.parameters() if p.requires_grad == trained), None))
           .replace("torch.", "") for which, trained in (("frozen", False), ("trainable", True))},
    }


def export_adapters(peft_model, weights: dict, tokenizer, folder: Path, merge: bool) -> dict:
    """Write the adapter folder (and the base, and the merged model) from the gathered host `weights`.

    The trained model is rebuilt on the host (the device's copy may be sharded and wrapped by FSDPv2): the base's
    architecture from its config, peft's wrapping from the run's LoraConfig, then every weight from `weights`.
    Returns {"adapter": folder, "merged": folder or None, "base": folder or None}.
    """
    from peft import get_peft_model
    from peft.utils import ModulesToSaveWrapper

    base_config = peft_model.get_base_model().config
    settings = copy.deepcopy(peft_model.peft_config["default"])
    host = get_peft_model(task.AUTO_MODEL.from_config(base_config), settings)
    host.load_state_dict(weights)  # strict: every name of the trained model, nothing else
    folder, written = Path(folder), {"adapter": str(folder), "merged": None, "base": None}
    if not base_config.name_or_path:
        # Built from a config (the demo): nothing to load it by, so it is written beside the adapters (first: peft's
        # save_pretrained reads the base's config from base_model_name_or_path).
        base_folder = folder.parent / BASE
        base = copy.deepcopy(host)
        # peft's unload() keeps the *trained* copy of each saved module (the head): put the frozen original back
        # into that copy first, so that the base folder holds the base as it was built.
        for module in base.modules():
            if isinstance(module, ModulesToSaveWrapper):
                for trained in module.modules_to_save.values():
                    trained.load_state_dict(module.original_module.state_dict())
        base.unload().save_pretrained(base_folder)
        tokenizer.save_pretrained(base_folder)
        host.peft_config["default"].base_model_name_or_path = str(base_folder.resolve())
        written["base"] = str(base_folder)
    host.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if merge:
        host.merge_and_unload().save_pretrained(folder.parent / MERGED)
        tokenizer.save_pretrained(folder.parent / MERGED)
        written["merged"] = str(folder.parent / MERGED)
    return written
