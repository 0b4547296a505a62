"""The trained model written where `from_pretrained` loads it: the run's last act (loop/training.py)."""

from pathlib import Path

from ..config import TrainConfig
from ..launch import processes
from ..models import lora
from . import model_card


def export(accelerator, layout, tokenizer, config: TrainConfig, report: dict) -> str:
    """The trained model as `save_pretrained` writes it (plain names, CPU tensors): `from_pretrained` loads it anywhere,
    with a model card (README.md: model_card.py) made from the run's report.

    Written once, by the main process; with LoRA the folder is peft's adapter folder (with `--merge_lora` also a
    merged model beside it: lora.py), whose README.md, peft's empty template, the card replaces.
    """
    folder = Path(config.export_dir)
    # Every process takes part: a sharded model is written by each host and put together on the main one.
    weights = layout.host_state_dict(accelerator, scratch=Path(config.output_dir) / ".export-shards")
    if processes.is_main(accelerator):
        model = layout.plain_model(accelerator)
        if hasattr(model, "peft_config"):
            lora.export_adapters(model, weights, tokenizer, folder, config.merge_lora)
        else:
            model.save_pretrained(folder, state_dict=weights)
            tokenizer.save_pretrained(folder)
        model_card.write(folder, report, config)
    processes.barrier(accelerator)
    return str(folder)
