"""The trained model written where `from_pretrained` loads it: the run's last act (loop/training.py)."""

from pathlib import Path

from ..config import TrainConfig
from ..launch import main_process, processes
from ..models import lora
from . import best_model, model_card


def export(accelerator, layout, tokenizer, config: TrainConfig, report: dict) -> str:
    """The trained model as `save_pretrained` writes it (plain names, CPU tensors): `from_pretrained` loads it anywhere,
    with a model card (README.md: model_card.py) made from the run's report.

    Written once, by the main process; with LoRA the folder is peft's adapter folder (with `--merge_lora` also a
    merged model beside it: lora.py), whose README.md, peft's empty template, the card replaces. With
    --load_best_model_at_end the weights are the best evaluation's, as best_model.py kept them, and the report's
    best_model.exported says which evaluation they are.
    """
    folder = Path(config.export_dir)
    kept = config.load_best_model_at_end and main_process.main_process_decides(
        accelerator, lambda: best_model.kept_path(config.output_dir).is_file())
    if kept:
        weights = _best_weights(accelerator, config, report) if processes.is_main(accelerator) else None
    else:
        # Every process takes part: a sharded model is written by each host and put together on the main one.
        weights = layout.host_state_dict(accelerator, scratch=Path(config.output_dir) / ".export-shards")
        if config.load_best_model_at_end and processes.is_main(accelerator):
            report["best_model"]["exported"] = None
            print("load_best_model_at_end: no evaluation's weights were kept (none improved since a resume from a run "
                  "without the flag): the export holds the last weights")
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


def _best_weights(accelerator, config: TrainConfig, report: dict) -> dict:
    """The kept best weights; the report and the console say which evaluation they are (and if the run's record of
    its best names another: a resume that did not repeat an evaluation the kept weights came from)."""
    kept = best_model.read_kept(config.output_dir)
    exported = {key: value for key, value in kept["best"].items() if key != "evaluations_since"}
    report["best_model"]["exported"] = exported
    print(f"load_best_model_at_end: the export holds the best evaluation's weights: {best_model.where(exported)}")
    recorded = report["best_model"]["best"] or {}
    if recorded.get("global_step") != exported["global_step"]:
        print(f"load_best_model_at_end: warning: the run's best evaluation is step {recorded.get('global_step')}'s, "
              f"but the weights kept are step {exported['global_step']}'s (an evaluation the resumed run did not repeat)")
    return kept["weights"]
