"""The architecture matrix's parts (tests/test_models.py): tiny random-weight models of many architectures, written
as save_pretrained folders with the project's demo tokenizer, trained through train.py in both layouts (to compare
them), one run after the other, and what each run must show.

Nothing is downloaded: every model is built from transformers' own config class at a tiny shape.
"""

import json
import math
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from conftest import TASK, child_env, python_command, run, spmd_env

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES
from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer
from {{ cookiecutter.project_slug }}.tasks import task

LENGTH = 32  # tokens a row (a packed block for the language model)
# One layer: compiling the step is most of a run's time, and a second identical layer adds no new operation. The
# architectures that alternate layer kinds (sliding and full attention) get two.
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2}
TWO_LAYERS = {"num_hidden_layers": 2}
DEVICES = 2  # the fsdp layout's SPMD devices (CPU_NUM_DEVICES)
BATCH = 8  # examples an optimizer step, in both layouts (fsdp: BATCH // DEVICES a device)
EPOCHS = 1
TRAIN_EXAMPLES = 256 if TASK == "causal-lm" else 480  # packed blocks, or texts (all of the demo's): 32 or 60 steps
# training.py reads the device twice an epoch: the epoch's summed training loss, and the evaluation's summed counts.
# Any other transfer is a host read inside a step (a `.item()`, a Python branch on a tensor) in the model's code.
TRANSFERS_PER_EPOCH = 2
# Each --logging_steps log reads two tensors more, on the metrics log's own thread: the loss sums and the gradient norm.
TRANSFERS_PER_LOG = 2
# The steady step (the first step already has the optimizer's state: loop/adamw.py), the evaluation step.
GRAPHS = 2
# High, to learn in one short epoch from random weights: at 1e-3 a one-layer BERT classifier was still at chance.
LEARNING_RATE = "1e-3" if TASK == "causal-lm" else "3e-3"
# Each architecture trains in both layouts, to compare them (compare_layouts). The matrix runs in an fsdp project
# (test_models.py is marked with that layout): the template's `make test` trains each architecture once per layout.
LAYOUTS = {
    "data": (["--parallelism", "data"], 1),
    "fsdp": (["--parallelism", "fsdp"], DEVICES),
}
RUN = [
    "--demo", "false", "--dataset", "files", "--train_file", str(DEMO_FILES["train"]), "--eval_file",
    str(DEMO_FILES["eval"]), "--max_seq_length", str(LENGTH), "--max_train_examples", str(TRAIN_EXAMPLES),
    "--num_epochs", str(EPOCHS), "--learning_rate", LEARNING_RATE, "--checkpoint", "false", "--compilation_cache", "false",
    "--max_recompilations", "0",
]


def _decoder(**extra) -> dict:
    """A decoder's tiny shape: grouped-query attention off (2 key/value heads), short positions."""
    return {**SHAPE, "num_key_value_heads": 2, "max_position_embeddings": 4 * LENGTH, **extra}


# name -> (config class, model class, the config's shape). Special token ids are added from the tokenizer.
{%- if cookiecutter.task == "causal-lm" %}
ARCHITECTURES = {
    "Llama": ("LlamaConfig", "LlamaForCausalLM", _decoder()),
    "Qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _decoder()),
    "Qwen3": ("Qwen3Config", "Qwen3ForCausalLM", _decoder(head_dim=32)),
    # A window shorter than the block, so that the sliding-window mask is in the graph.
    "Mistral": ("MistralConfig", "MistralForCausalLM", _decoder(sliding_window=LENGTH // 2)),
    "Gemma 2": ("Gemma2Config", "Gemma2ForCausalLM", _decoder(**TWO_LAYERS, head_dim=32, sliding_window=LENGTH // 2)),
    "Gemma 3": ("Gemma3TextConfig", "Gemma3ForCausalLM", _decoder(
        **TWO_LAYERS, head_dim=32, sliding_window=LENGTH // 2, layer_types=["sliding_attention", "full_attention"],
    )),
    "Phi-3": ("Phi3Config", "Phi3ForCausalLM", _decoder()),
    # A mixture of experts: two of four experts a token (models/modeling.py: their batched form, fixed shapes).
    "Mixtral": ("MixtralConfig", "MixtralForCausalLM", _decoder(num_local_experts=4, num_experts_per_tok=2)),
    "GPT-2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 64, "n_layer": 1, "n_head": 2, "n_inner": 128,
                                                "n_positions": 4 * LENGTH}),
}
{%- else %}
ARCHITECTURES = {
    "BERT": ("BertConfig", "BertForSequenceClassification", {**SHAPE, "max_position_embeddings": 4 * LENGTH}),
    # RoBERTa numbers positions from pad_token_id + 1.
    "RoBERTa": ("RobertaConfig", "RobertaForSequenceClassification", {
        **SHAPE, "max_position_embeddings": 4 * LENGTH + 2,
    }),
    "DistilBERT": ("DistilBertConfig", "DistilBertForSequenceClassification", {
        "dim": 64, "hidden_dim": 128, "n_layers": 1, "n_heads": 2, "max_position_embeddings": 4 * LENGTH,
    }),
    "ELECTRA": ("ElectraConfig", "ElectraForSequenceClassification", {
        **SHAPE, "embedding_size": 64, "max_position_embeddings": 4 * LENGTH,
    }),
    # DeBERTa-v3's own settings: relative positions in log buckets, no absolute positions.
    "DeBERTa-v2": ("DebertaV2Config", "DebertaV2ForSequenceClassification", {
        **SHAPE, "max_position_embeddings": 4 * LENGTH, "relative_attention": True, "position_buckets": 256,
        "norm_rel_ebd": "layer_norm", "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False, "max_relative_positions": -1,
    }),
    # Local attention over a window shorter than the row, so that its mask is in the graph.
    "ModernBERT": ("ModernBertConfig", "ModernBertForSequenceClassification", {
        **SHAPE, **TWO_LAYERS, "max_position_embeddings": 4 * LENGTH, "local_attention": LENGTH // 2,
        "global_attn_every_n_layers": 2,
    }),
    # A decoder as a classifier: it classifies by its last non-padding token (found with pad_token_id).
    "Qwen2 (decoder)": ("Qwen2Config", "Qwen2ForSequenceClassification", _decoder()),
}
{%- endif %}


def demo_tokenizer():
    """The project's demo tokenizer, trained on the shipped demo text, with the ids a decoder needs."""
    config = TrainConfig(demo=True)
    tokenizer = load_tokenizer(config.data, config.model, demo=True)
    tokenizer.bos_token, tokenizer.eos_token = tokenizer.cls_token, tokenizer.sep_token
    return tokenizer


def special_ids(tokenizer) -> dict:
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    return {**ids, "cls_token_id": tokenizer.cls_token_id, "sep_token_id": tokenizer.sep_token_id}


def write_model(folder: Path, name: str, tokenizer, dropout: bool = True) -> Path:
    """The architecture at its tiny shape with random weights, vocabulary sized to the tokenizer, saved with it;
    every dropout probability of its config 0 without `dropout`."""
    import torch
    import transformers

    config_class, model_class, shape = ARCHITECTURES[name]
    config = getattr(transformers, config_class)(vocab_size=len(tokenizer), **special_ids(tokenizer), **shape)
    if not dropout:
        for key, value in config.to_dict().items():
            if "dropout" in key and isinstance(value, float):
                setattr(config, key, 0.0)
    if TASK != "causal-lm":
        config.num_labels = 2
    torch.manual_seed(0)
    getattr(transformers, model_class)(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def untrained_metrics(folder: Path) -> dict:
    """The folder's model before any step: the task's eval metrics on the plain CPU in float32 (host_evaluation)."""
    from conftest import evaluate_on_cpu

    from {{ cookiecutter.project_slug }}.models.modeling import make_graph_friendly

    config = TrainConfig(demo=False, model_name_or_path=str(folder), dataset="files",
                         train_file=str(DEMO_FILES["train"]), eval_file=str(DEMO_FILES["eval"]), max_seq_length=LENGTH)
    _, tokenizer, _, eval_examples = task.load_examples(config, demo=False)
    model = make_graph_friendly(task.AUTO_MODEL.from_pretrained(folder))
    return evaluate_on_cpu(model, tokenizer, eval_examples, LENGTH)


def command(folder: Path, output: Path, layout: str) -> tuple[list, dict]:
    flags, devices = LAYOUTS[layout]
    batch = ["--train_batch_size", str(BATCH // devices), "--eval_batch_size", str(4 * BATCH // devices)]
    argv = python_command("--model_name_or_path", str(folder), "--output_dir", str(output), *RUN, *batch, *flags)
    return argv, spmd_env(devices) if devices > 1 else child_env()


def run_each(runs: dict, timeout: float = 900) -> dict:
    """{key: (argv, env, log folder)} run one after the other (forked from the tests' fork server: conftest.run);
    returns {key: (exit status, seconds)}, each run's output written to its log folder.

    One at a time: under the template's `make test` another suite has the other core."""
    done = {}
    for key, (argv, env, logs) in runs.items():
        logs.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            result = run(argv, env=env, timeout=timeout, check=False)
            status, out, err = result.returncode, result.stdout, result.stderr
        except subprocess.TimeoutExpired as error:
            status, out, err = f"killed after {timeout} s", error.output, error.stderr
        for name, text in (("stdout.txt", out), ("stderr.txt", err)):
            (logs / name).write_text(text.decode(errors="replace") if isinstance(text, bytes) else text or "")
        done[key] = (status, time.monotonic() - started)
    return done


@dataclass
class Row:
    """One architecture in one layout: what its run showed, and what the matrix table says of it."""

    architecture: str
    task: str
    layout: str
    devices: int
    graphs: int | None = None
    transfers_per_epoch: float | None = None
    recompilations: int | None = None
    use_cache: bool | None = None
    eval_loss: float | None = None
    untrained_eval_loss: float | None = None
    metric: dict = field(default_factory=dict)
    exported_loads: bool | None = None
    seconds: float | None = None
    problems: list = field(default_factory=list)

    @property
    def status(self) -> str:
        return "pass" if not self.problems else "fail"

    def as_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def judge(name: str, layout: str, exit_status: int, seconds: float, output: Path, untrained: dict) -> Row:
    """The run's facts and every way it falls short of the matrix's promises (empty: it passed)."""
    row = Row(name, TASK, layout, LAYOUTS[layout][1], seconds=round(seconds, 1),
              untrained_eval_loss=untrained["eval_loss"])
    report_file = output / "report.json"
    if exit_status != 0 or not report_file.exists():
        lines = [line.split("\r")[-1] for name in ("stdout.txt", "stderr.txt")
                 for line in (output / name).read_text(errors="replace").splitlines()]
        said = [line for line in lines if "error" in line.lower()] or lines or ["no output"]
        row.problems.append(f"exit status {exit_status}: {said[-1][:300]} (logs: {output})")
        return row
    report = json.loads(report_file.read_text())
    row.graphs, row.recompilations = report["xla_compilations"], report["recompilations"]
    row.transfers_per_epoch = (report["device_to_host_transfers"] - TRANSFERS_PER_LOG * report["logging"]["logs"]) / \
        report["epochs_run"]
    row.use_cache, row.eval_loss = report["model"]["use_cache"], report["eval_loss"]
    metric = "eval_perplexity" if TASK == "causal-lm" else "eval_accuracy"
    row.metric = {metric: report[metric], f"untrained_{metric}": untrained[metric]}
    if row.graphs != GRAPHS:
        row.problems.append(f"{row.graphs} XLA graphs, not {GRAPHS}")
    if row.recompilations != 0:
        row.problems.append(f"{row.recompilations} recompilations")
    logs = report["logging"]["logs"]
    if report["device_to_host_transfers"] != TRANSFERS_PER_EPOCH * report["epochs_run"] + TRANSFERS_PER_LOG * logs:
        row.problems.append(f"{report['device_to_host_transfers']} device-to-host transfers in {report['epochs_run']} "
                            f"epoch(s) and {logs} logs, not {TRANSFERS_PER_EPOCH} an epoch and {TRANSFERS_PER_LOG} a "
                            "log: a host read inside a step")
    if row.use_cache is not False:  # an encoder has no cache: false too
        row.problems.append(f"use_cache={row.use_cache}: training built a KV cache")
    if not (row.eval_loss is not None and math.isfinite(row.eval_loss)):
        row.problems.append(f"eval loss {row.eval_loss}")
    elif not row.eval_loss < untrained["eval_loss"]:
        row.problems.append(
            f"eval loss {row.eval_loss:.4f}, not below the untrained model's {untrained['eval_loss']:.4f}")
    try:
        task.AUTO_MODEL.from_pretrained(report["exported"])
        row.exported_loads = True
    except Exception as error:  # any failure to load is the finding
        row.exported_loads = False
        row.problems.append(f"the export does not load: {type(error).__name__}: {error}"[:300])
    return row


def compare_layouts(rows: dict, tolerance: float = 0.05) -> None:
    """Add a problem to both rows of an architecture whose two layouts learned different models.

    Both layouts train the same model on the same batches of the same global size. Measured: the language models'
    eval losses agree to 1e-4 nats, the classifiers' (a high learning rate, bf16 sums in another order) within 0.02;
    an embedding tied in one layout and not in the other once moved them 0.5 nats apart.
    """
    for name in {name for name, _ in rows}:
        data, fsdp = rows.get((name, "data")), rows.get((name, "fsdp"))
        if data is None or fsdp is None or data.eval_loss is None or fsdp.eval_loss is None:
            continue
        if not abs(data.eval_loss - fsdp.eval_loss) <= tolerance:
            problem = (f"the layouts learned different models: eval loss {data.eval_loss:.4f} (data) against "
                       f"{fsdp.eval_loss:.4f} (fsdp)")
            data.problems.append(problem)
            fsdp.problems.append(problem)


def write_results(rows: list) -> list[Path]:
    """The rows as JSON into the folder MODEL_MATRIX_RESULTS names (one file per task and layout), when it is set."""
    folder = os.environ.get("MODEL_MATRIX_RESULTS")
    if not folder:
        return []
    paths = []
    for layout in LAYOUTS:
        path = Path(folder) / f"models-{TASK}-{layout}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = [row.as_dict() for row in rows if row.layout == layout]
        path.write_text(json.dumps({"task": TASK, "rows": kept}, indent=2) + "\n")
        paths.append(path)
    return paths
