"""predict.py's command line: an exported model over a CSV or JSON lines file, into a CSV or JSON lines file.

`python predict.py --model outputs/model --input FILE --output PATH`, under the same launchers as train.py. Bad
input (a model folder without weights, an input without its column, an empty file, an output folder that does not
exist) is one line naming it, exit status 2, and no output file.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .config import TrainConfig, UserError

BASE = TrainConfig()  # the bake's defaults: batch size, sequence length, layout
BATCH = BASE.per_chip_eval_batch(BASE.per_chip_train_batch(False, 1))  # the bake's evaluation batch per chip
PRECISIONS = {"bf16": "bf16", "no": "fp32"}  # --mixed_precision: the training level it runs the forward at
{%- if cookiecutter.task == "causal-lm" %}
GENERATE_ON = ("device", "host")
{%- endif %}


@dataclass
class PredictConfig:
    model: str = field(metadata={"help": "The folder train.py exported (OUTPUT_DIR/model)."})
    input: str = field(metadata={"help": "A CSV or JSON lines file with a text column, or a hub data set (name or name/config) or a folder laid out like one, with --split."})
    output: str = field(metadata={"help": "Where the predictions go: .csv, else JSON lines."})
    split: str = field(default="test", metadata={"help": "The split of a hub data set (--input) to read."})
    text_column: str = field(default="text", metadata={"help": "The column to {{ 'continue' if cookiecutter.task == 'causal-lm' else 'label' }}."})
{%- if cookiecutter.task != "causal-lm" %}
    text_pair_column: str | None = field(default=None, metadata={"help": "Second text column, if the model was trained with one."})
    label_column: str | None = field(default=None, metadata={"help": "A column of true labels (0 .. the head's labels - 1), if the input has one: each checked, kept beside the prediction, and the accuracy reported."})
    batch_size: int = field(default=BATCH, metadata={"help": "Per chip; the last batch is padded."})
    max_seq_length: int | None = field(default=None, metadata={"help": f"Every row padded or cut to this. Default: {BASE.max_seq_length}, or the model's positions if fewer."})
{%- else %}
    max_new_tokens: int = field(default=32, metadata={"help": "Tokens generated after each prompt."})
    temperature: float = field(default=0.0, metadata={"help": "0: greedy (the most likely token); above 0: sampled."})
    seed: int = field(default=BASE.seed, metadata={"help": "The sampling's random seed."})
    batch_size: int = field(default=BATCH, metadata={"help": "Prompts per chip; the last batch is padded."})
    generate_on: str = field(default="device", metadata={"help": "device: the XLA device, a static KV cache (2 graphs); host: the host's CPU, one prompt at a time, greedy."})
{%- endif %}
    mixed_precision: str = field(default={{ cookiecutter.mixed_precision | tojson }}, metadata={"help": "bf16: the forward under torch.autocast(bfloat16), as training's default level; no: float32."})
    parallelism: str = field(default=BASE.parallelism, metadata={"help": "data or fsdp: as the model was trained."})
    report: str | None = field(default=None, metadata={"help": "The run's figures as JSON. Default: OUTPUT.report.json"})


def parse(argv=None) -> PredictConfig:
    from transformers import HfArgumentParser

    (config,) = HfArgumentParser(PredictConfig).parse_args_into_dataclasses(args=argv)
    return config


def check_paths(config: PredictConfig) -> None:
    from .loop.prediction import PredictionProblem

    model = Path(config.model)
    if (model / "manifest.json").is_file() and (model / "settings.json").is_file():
        raise PredictionProblem(f"model={config.model!r}: a checkpoint, not an export: give OUTPUT_DIR/model, which a run "
                                "writes at its end (resume the run with --resume true to finish and export it)")
    if not (model / "config.json").is_file() and not (model / "adapter_config.json").is_file():
        raise PredictionProblem(f"model={config.model!r}: no config.json there: give the folder train.py exported "
                                "(OUTPUT_DIR/model)")
    if not any(model.glob("*.safetensors")) and not any(model.glob("*.bin")):
        raise PredictionProblem(f"model={config.model!r}: no weights there (*.safetensors): the export is incomplete")
    if not Path(config.output).resolve().parent.is_dir():
        raise PredictionProblem(f"output={config.output!r}: its folder does not exist")
    if config.mixed_precision not in PRECISIONS:
        raise PredictionProblem(f"mixed_precision={config.mixed_precision!r}: must be one of {', '.join(PRECISIONS)}")
    positions = _model_config(model).get("max_position_embeddings")
{%- if cookiecutter.task != "causal-lm" %}
    if config.max_seq_length is None:
        config.max_seq_length = min(BASE.max_seq_length, positions or BASE.max_seq_length)
    elif config.max_seq_length < 1 or (positions and config.max_seq_length > positions):
        limit = f"from 1 to {positions}, the positions the model has" if positions else "at least 1"
        raise PredictionProblem(f"max_seq_length={config.max_seq_length}: must be {limit}")
{%- else %}
    if positions and config.max_new_tokens >= positions:
        raise PredictionProblem(f"max_new_tokens={config.max_new_tokens}: must be below {positions}, the positions "
                                "the model has for a prompt and its continuation together")
    if config.generate_on not in GENERATE_ON:
        raise PredictionProblem(f"generate_on={config.generate_on!r}: must be one of {', '.join(GENERATE_ON)}")
    if config.max_new_tokens < 1:
        raise PredictionProblem(f"max_new_tokens={config.max_new_tokens}: must be at least 1")
    if not config.temperature >= 0:
        raise PredictionProblem(f"temperature={config.temperature}: must be 0 (greedy) or above")
    if config.generate_on == "host" and config.temperature:
        raise PredictionProblem(f"temperature={config.temperature}: the host generates greedily only (temperature 0); "
                                "sample with --generate_on device")
{%- endif %}


def _model_config(model: Path) -> dict:
    """The exported model's config.json; {} for a LoRA export (the adapter alone: its base model's says)."""
    if not (model / "config.json").is_file():
        return {}
    return json.loads((model / "config.json").read_text(encoding="utf-8"))


def at_precision(model, config: PredictConfig, device) -> tuple:
    """(the model with its forward at --mixed_precision, what the report says of it), applied and checked as training
    applies its level (precision/levels.py: autocast around the forward, verified in a lowered graph on XLA)."""
    from .precision import levels

    report = levels.realise(PRECISIONS[config.mixed_precision], device)
    return levels.apply_to_model(model, report, device), {"precision": report.effective, "precision_via": report.via}


def read_input(config: PredictConfig, columns: list[str], checks=None):
    """The examples of --input: a file checked row by row as training's files are, else a split of a hub data set (or
    of a local folder laid out like one: validation.csv, test.jsonl, ...), said in one line when it is neither."""
    from .data.hub import load_hub_dataset, looks_local
    from .data.sources import read_checked
    from .loop.prediction import PredictionProblem

    path = Path(config.input)
    if path.is_file():
        return read_checked(config.input, columns, checks)
    if looks_local(config.input) and not path.is_dir():
        raise PredictionProblem(f"input={config.input!r}: no such file or folder")
    try:
        loaded = load_hub_dataset(config.input)
    except Exception as error:  # offline, no such data set, no files it can read: datasets' own words, first line
        said = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise PredictionProblem(f"input={config.input!r}: not a file, and not a data set to load ({said})") from None
    if config.split not in loaded:
        raise PredictionProblem(f"split={config.split!r}: {config.input} has no such split (splits: {', '.join(loaded)})")
    examples = loaded[config.split]
    missing = [column for column in columns if column not in examples.column_names]
    if missing:
        raise PredictionProblem(f"input={config.input!r} split {config.split!r}: no column {missing[0]!r} "
                                f"(columns: {', '.join(examples.column_names)})")
    if len(examples) == 0:
        raise PredictionProblem(f"input={config.input!r} split {config.split!r}: no examples")
    if checks and (problem := checks.split(examples)):
        raise PredictionProblem(f"input={config.input!r} split {config.split!r}: {problem}")
    return examples


def run(config: PredictConfig) -> dict:
    """The predictions written to config.output; the run's figures (also in the report file)."""
    import torch

    from .launch import environment, processes
    from .loop import prediction
    from .loop.context import RunContext
    from .models.modeling import make_graph_friendly
    from .parallel import layout_for
{%- if cookiecutter.task != "causal-lm" %}
    from .tasks import task
{%- endif %}
    from .watch import compilations

    check_paths(config)
{%- if cookiecutter.task != "causal-lm" %}
    from .loop.predict_labels import head_size, predict

    columns = [config.text_column] + ([config.text_pair_column] if config.text_pair_column else [])
    # True labels, if given, refused as training refuses them: outside the head's labels, not whole numbers.
    checks = task.label_checks(config.label_column, head_size(Path(config.model))) if config.label_column else None
    examples = read_input(config, columns, checks)
{%- else %}
    examples = read_input(config, [config.text_column])
{%- endif %}
    trained = TrainConfig(parallelism=config.parallelism)  # the layout as training made it, with the bake's defaults
    layout = layout_for(trained.parallel, trained.model)
    layout.start()
    processes.wait_for_forked_siblings()
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=not environment.xla_installed() and not torch.cuda.is_available())
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.model)
    precision_figures = {}  # none when the host generates: it runs float32
    with compilations.counting_compilations() as compiled:
{%- if cookiecutter.task == "causal-lm" %}
        from accelerate.utils import set_seed

        from .loop.predict_continuations import predict
        from .tasks import samples

        set_seed(config.seed)  # the sampling's draws (torch_xla's generator too)
        # The attention and hub-kernel settings the model trained with (models/modeling.py); a LoRA export via peft.
        model = None
        if config.generate_on == "device":
            model, precision_figures = at_precision(make_graph_friendly(samples.load_for_generation(config.model)),
                                                    config, accelerator.device)
        predictions, figures = predict(RunContext(accelerator, layout, config), model, tokenizer,
                                       list(examples[config.text_column]))
{%- else %}
        # Tokenized as training tokenizes (the task's batched map), each row numbered for the gathering.
        rows = task.tokenize(examples, tokenizer, config.text_column, config.text_pair_column, None, config.max_seq_length)
        rows = rows.add_column(prediction.ROW, list(range(len(rows))))
        # The attention, cache and hub-kernel settings the model trained with (models/modeling.py): transformers'
        # default sdpa reads the attention mask back to the host at every batch, a graph of its own on XLA.
        model, precision_figures = at_precision(make_graph_friendly(task.AUTO_MODEL.from_pretrained(config.model)),
                                                config, accelerator.device)
        predictions, figures = predict(RunContext(accelerator, layout, config), model, tokenizer, rows)
{%- endif %}
    figures.update(precision_figures)
    figures.update(device=str(accelerator.device), processes=accelerator.num_processes,
                   graphs=compiled["compilations"], input=config.input, output=config.output)
{%- if cookiecutter.task != "causal-lm" %}
    if config.label_column:
        for row, label in zip(predictions, examples[config.label_column], strict=True):
            row["true_label"] = int(float(label))
        figures["accuracy"] = sum(row["label"] == row["true_label"] for row in predictions) / len(predictions) \
            if predictions else None
{%- endif %}
    if processes.is_main(accelerator):
        prediction.write_atomically(config.output, predictions)
        report = Path(config.report or f"{config.output}.report.json")
        report.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
        print(f"predictions: {config.output} ({figures['examples']} rows); " + ", ".join(
            f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
            for name, value in figures.items() if name not in ("input", "output")))
    processes.barrier(accelerator)
    return figures


def main(argv=None) -> int:
    config = parse(argv)
    try:
        run(config)
    except UserError as error:  # every known problem (config/errors.py): one line, no output file
        print(f"{error.said_as}: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
