"""The precision policy: each level reaches the graph and is reported; the default keeps every update; metrics are
exact in every level; pure bf16 says what it loses.

Each level runs in a fresh process: torch_xla reads its bf16 variables once per process. The policy does not depend on
the layout: its runs are tested in a data-layout project (tests/conftest.py); the architecture matrix (test_models.py)
trains the default bf16 in the fsdp layout.
"""

import json
import math
import os

import pytest
import torch
from conftest import QUICK, TASK, close_metrics, python_code, python_command, run

from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig
from {{ cookiecutter.project_slug }}.precision import bf16_updates
from {{ cookiecutter.project_slug }}.precision import levels as precision

LEVEL_FLAGS = {
    "fp32": ["--mixed_precision", "no"],
    "bf16": ["--mixed_precision", "bf16", "--pure_bf16", "no"],
    "pure-bf16-xla": ["--mixed_precision", "bf16", "--pure_bf16", "xla"],
    "pure-bf16-downcast": ["--mixed_precision", "bf16", "--pure_bf16", "downcast"],
    "pure-bf16-cast": ["--mixed_precision", "bf16", "--pure_bf16", "cast"],
}
XLA_LEVELS = ("fp32", "bf16", "pure-bf16-xla", "pure-bf16-downcast")
# torch_xla's documented behaviour, written here independently of the code's tables (precision/levels.py), so that a
# wrong table fails: (a float32 tensor's type in the graph, a float64 tensor's type) under each level's variables.
EXPECTED_TYPES = {"fp32": ("f32", "f64"), "bf16": ("f32", "f64"), "pure-bf16-xla": ("bf16", "bf16"),
                  "pure-bf16-downcast": ("bf16", "f32")}
EXPECTED_VARIABLES = {  # XLA_USE_BF16 turns every float type to bf16; XLA_DOWNCAST_BF16 float32 to bf16, float64 to f32
    "fp32": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "0"}, "bf16": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "0"},
    "pure-bf16-cast": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "0"},
    "pure-bf16-xla": {"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "0"},
    "pure-bf16-downcast": {"XLA_USE_BF16": "0", "XLA_DOWNCAST_BF16": "1"},
}
DEPRECATION = "will be deprecated after the 2.6 release"
FINE_TUNING_RATE = "2e-5"  # a pretrained model's learning rate: where bf16 weights lose their updates

LOWERING = """
import json, sys, torch_xla
from {{ cookiecutter.project_slug }}.precision import levels as precision
precision.set_xla_variables(sys.argv[1])
print(json.dumps(precision.lowered_types(torch_xla.device())))
"""


@pytest.mark.xla
@pytest.mark.parametrize("level", XLA_LEVELS)
def test_graph_holds_the_promised_types(level):
    result = run(python_code(LOWERING, level))
    found = tuple(json.loads(result.stdout.strip().splitlines()[-1]))
    assert found[:2] == EXPECTED_TYPES[level] == precision.PROMISED_TYPES[level]
    assert found[2] == "bf16"  # a matmul under torch.autocast(xla) computes in bf16 (what the default relies on)


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("bf16", "the bf16 demo's eval metrics against the float32 demo's")
def test_the_default_is_bf16_compute_on_float32_weights_in_two_graphs(demo_report):
    """The default demo: autocast, float32 state, 2 graphs, no deprecation warning, and it learns like float32."""
    report, result = demo_report("bf16")
    assert report["precision"]["requested"] == report["precision"]["effective"] == "bf16"
    assert report["precision"]["autocast"] is True
    assert report["precision"]["verified"] == "f32->f32, f64->f64 in graph, autocast matmul -> bf16"
    assert report["precision"]["stored"]["weights"] == report["precision"]["stored"]["optimizer state"] == "float32"
    assert report["xla_compilations"] == 2
    assert DEPRECATION not in result.stdout + result.stderr
    assert math.isfinite(report["eval_loss"])
    assert close_metrics(report, demo_report("fp32")[0])


# A run whose evaluation covers at least 400 examples (the training set), keeping every per-example loss the device
# computed before it was summed (as outputs of the same eval graph: read once, after the run), and the weights the
# model started from. Its evaluation is traced op by op, so that the losses can be kept as they are computed: the
# JAX evaluation (the default with the JAX step) computes them inside one function, and gives the same metrics
# (tests/test_jax_eval.py).
RECORDING = """
import sys, torch
from {{ cookiecutter.project_slug }} import cli
from {{ cookiecutter.project_slug }}.loop import preparation
from {{ cookiecutter.project_slug }}.tasks import task

preparation.whole_eval = lambda context: None

record, *argv = sys.argv[1:]
losses, original_load, original_fixed, original_build = [], task.load_examples, task.finite_to_fixed, task.build_model

def load_examples(config, demo):
    limit, config.max_train_examples = config.max_train_examples, None
    data, tokenizer, train, _ = original_load(config, demo)
    config.max_train_examples = limit
    return data, tokenizer, train.select(range(min(limit, len(train)))), train

def recording(values):
    losses.append(values.detach())
    return original_fixed(values)

def build_model(*args, **kwargs):
    model = original_build(*args, **kwargs)
    torch.save({name: tensor.detach().clone() for name, tensor in model.state_dict().items()}, record + "/initial.pt")
    return model

task.load_examples, task.finite_to_fixed, task.build_model = load_examples, recording, build_model
try:
    cli.main(argv)
finally:
    torch.save([values.cpu().double() for values in losses], record + "/losses.pt")
"""
RECORDED_RUNS = {
    **{level: flags for level, flags in LEVEL_FLAGS.items()},
    # The model-cast level runs with Kahan summation: the same stored types, and the compensated optimizer proven.
    "pure-bf16-cast": [*LEVEL_FLAGS["pure-bf16-cast"], "--kahan_summation", "true"],
}
# Short: two optimizer steps, and 400 or more eval examples (tokens) in a few large batches; under the graph watch.
SHORT = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "32", "--train_batch_size", "16",
         "--eval_batch_size", "96", "--num_epochs", "1", "--learning_rate", FINE_TUNING_RATE, "--checkpoint", "false",
         "--max_recompilations", "0"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One short run per level at the fine-tuning rate: (report, process, per-example losses, initial weights)."""
    runs = {}

    def get(level):
        if level not in runs:
            folder = tmp_path_factory.mktemp(level)
            args = [*SHORT, *RECORDED_RUNS[level], "--output_dir", str(folder / "outputs")]
            result = run(python_code(RECORDING, str(folder), *args))
            report = json.loads((folder / "outputs" / "report.json").read_text())
            runs[level] = report, result, torch.load(folder / "losses.pt"), torch.load(folder / "initial.pt")
        return runs[level]

    return get


def exact_mean(report: dict, losses: list) -> float:
    """The recorded per-example (per-token) losses of the counted examples, summed exactly on the host."""
    rows = torch.cat(losses)[: report["eval_examples_counted"]]  # masked copies of the last batch come last
    counted = report["eval_tokens_counted"] if TASK == "causal-lm" else report["eval_examples_counted"]
    return math.fsum(rows.flatten().tolist()) / counted  # bf16 and float32 values are exact in float64


@pytest.mark.xla
@pytest.mark.parametrize("level", list(LEVEL_FLAGS))
@pytest.mark.slow
@pytest.mark.layout("data")
def test_reported_eval_loss_is_the_exact_sum_of_what_the_device_computed(recorded, level):
    report, _, losses, _ = recorded(level)
    assert report["precision"]["requested"] == level
    # Every level trains in the same 2 graphs; Kahan's compensated optimizer (optimi's) makes its state inside its
    # first step, which is then a graph of its own.
    assert report["xla_compilations"] == (3 if level == "pure-bf16-cast" else 2)
    assert report["eval_tokens_counted" if TASK == "causal-lm" else "eval_examples_counted"] >= 400
    assert report["eval_loss"] == pytest.approx(exact_mean(report, losses), rel=1e-4)


def changed_fraction(report: dict, initial: dict) -> float:
    """Elements of the weight matrices that moved, each compared in the type the level stores it in."""
    from {{ cookiecutter.project_slug }}.tasks import task

    trained = task.AUTO_MODEL.from_pretrained(report["exported"])
    pure = report["precision"]["stored"]["weights"] == "bf16"
    changed = total = 0
    for name, after in trained.state_dict().items():
        before = initial[name]
        if before.dim() != 2 or not before.is_floating_point():
            continue
        before = before.to(torch.bfloat16).float() if pure else before.float()
        changed += int((after.float() != before).sum())
        total += before.numel()
    return changed / total


def moved_at_or_above(report: dict, initial: dict, magnitude: float) -> tuple[int, int, int]:
    """(moved, counted, elements): of the trained weight elements (each parameter once, as named_parameters gives
    tied ones), those that started at `magnitude` or more, and how many of them the run moved, each compared in the
    type it is stored in."""
    from {{ cookiecutter.project_slug }}.tasks import task

    trained = task.AUTO_MODEL.from_pretrained(report["exported"])
    pure = report["precision"]["stored"]["weights"] == "bf16"
    moved = counted = elements = 0
    for name, after in trained.named_parameters():
        before = initial[name].to(torch.bfloat16).float() if pure else initial[name].float()
        at_risk = initial[name].float().abs() >= magnitude
        moved += int((after.detach().float() != before)[at_risk].sum())
        counted += int(at_risk.sum())
        elements += at_risk.numel()
    return moved, counted, elements


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_the_default_keeps_every_update_and_pure_bf16_says_what_it_loses(recorded):
    default, default_run, _, default_initial = recorded("bf16")
    assert changed_fraction(default, default_initial) >= 0.99
    assert default["precision"]["updates_at_risk"] is None
    assert "rounds away" not in default_run.stdout

    pure, pure_run, _, initial = recorded("pure-bf16-xla")
    lost = pure["precision"]["updates_at_risk"]
    assert lost["weights_at_or_above"] == bf16_updates.lost_above(float(FINE_TUNING_RATE)) == 2**-7
    # The fraction said is a count of the starting weights at or above 2**-7, made here from the weights alone.
    moved, counted, elements = moved_at_or_above(pure, initial, 2**-7)
    assert lost["fraction_of_elements"] == counted / elements
    # Those weights kept their starting value, where the default moved every one of them. Nearly all: a weight exactly
    # at a power of two has half the spacing below it, so a step toward 0 can land (51 of the classifier demo's
    # 56,684, 61 of the LM demo's 69,695).
    assert moved < counted / 100
    assert moved_at_or_above(default, default_initial, 2**-7)[:2] == (counted, counted)
    assert pure_run.stdout.count("every AdamW update rounds away") == 1  # said once, with the fix
    assert "--kahan_summation true" in pure_run.stdout

    # Kahan summation keeps the rounded-away part in a bf16 buffer: a short run shows it in the report, not yet in
    # the weights (the benchmark's fine-tuning comparison measures what it keeps over more steps).
    kahan, kahan_run, _, _ = recorded("pure-bf16-cast")
    assert kahan["precision"]["kahan_summation"] is True
    assert kahan["precision"]["stored"]["Kahan compensation"].startswith("bf16")
    assert kahan["precision"]["updates_at_risk"] is None
    assert "rounds away" not in kahan_run.stdout


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")
def test_fallback_when_torch_xla_ignores_the_variables(tmp_path):
    """Variables set after the device is initialised are ignored: the model cast must take over, and say so."""
    code = f"""
import torch, torch_xla
torch.ones(2, device=torch_xla.device()) + 1
torch_xla.sync()
from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.loop.training import training_function
training_function(config=parse({[*QUICK, "--pure_bf16", "xla", "--output_dir", str(tmp_path)]!r}))
"""
    result = run(python_code(code))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["precision"]["requested"] == "pure-bf16-xla"
    assert report["precision"]["effective"] == "pure-bf16-cast"
    assert report["precision"]["via"] == "model.to(torch.bfloat16)"
    assert "XLA_USE_BF16 ignored" in report["precision"]["verified"]
    assert "precision: XLA_USE_BF16 ignored" in result.stdout
    assert math.isfinite(report["eval_loss"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mixed_precision", "no", "--pure_bf16", "xla"], "pure_bf16='xla' needs mixed_precision=bf16"),
        (["--pure_bf16", "fp16"], "pure_bf16='fp16': must be one of no, xla, downcast, cast"),
        (["--pure_bf16", "no", "--kahan_summation", "true"], "kahan_summation=True: only with pure bf16 weights"),
    ],
    ids=["pure-without-bf16", "unknown-pure", "kahan-without-pure"],
)
def test_bad_precision_flags_are_refused_in_one_line(flags, message):
    result = run(python_command(*flags), check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]


def test_downcast_from_accelerate_launch_without_bf16_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_DOWNCAST_BF16", "true")
    with pytest.raises(ConfigError, match="pure_bf16='downcast' needs mixed_precision=bf16"):
        precision.requested_level(TrainConfig().precision)


@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        ({"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_DOWNCAST_BF16": "true"}, {}, "pure-bf16-downcast"),
        ({"ACCELERATE_MIXED_PRECISION": "no"}, {}, "fp32"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, {}, "baked"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, {"pure_bf16": "cast"}, "pure-bf16-cast"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, {"mixed_precision": "no"}, "fp32"),
        # On a TPU, `accelerate launch` with bf16 sets only the XLA variables: the guide's pure levels.
        ({"XLA_DOWNCAST_BF16": "1"}, {}, "pure-bf16-downcast"),
        ({"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "0"}, {}, "pure-bf16-xla"),
        ({"XLA_USE_BF16": "1"}, {"mixed_precision": "no"}, "fp32"),
        ({"XLA_USE_BF16": "1"}, {"pure_bf16": "no"}, "bf16"),
    ],
    ids=["launch-downcast", "launch-no", "launch-bf16", "flag-adds-cast", "flag-wins", "tpu-launch-downcast",
         "tpu-launch-bf16", "flag-beats-tpu-launch", "flag-keeps-float32-weights"],
)
def test_accelerate_launch_settings_are_honoured(monkeypatch, env, flags, expected):
    for name in ("ACCELERATE_MIXED_PRECISION", "ACCELERATE_DOWNCAST_BF16", "XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if expected == "baked":  # bf16 from the launcher: where the weights live is the baked answer's
        pure = precision.BAKED_PURE_BF16
        expected = "bf16" if pure == "no" else f"pure-bf16-{pure}"
    assert precision.requested_level(TrainConfig(**flags).precision) == expected


def test_set_xla_variables_leaves_accelerate_nothing_to_override(monkeypatch):
    for name in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "ACCELERATE_DOWNCAST_BF16"):
        monkeypatch.setenv(name, "unset-by-test")  # so that monkeypatch restores the real value afterwards
    assert sorted(precision.XLA_VARIABLES) == sorted(EXPECTED_VARIABLES)
    for level, variables in EXPECTED_VARIABLES.items():
        precision.set_xla_variables(level)
        assert {name: os.environ[name] for name in variables} == variables
        assert "ACCELERATE_DOWNCAST_BF16" not in os.environ


def test_the_threshold_is_half_a_bf16_step():
    """Computed, then checked against torch's own bf16 rounding: a step of the rate is lost at the threshold."""
    for rate in (1e-3, 2e-5, 1e-5):
        threshold = bf16_updates.lost_above(rate)
        for weight in (torch.tensor(threshold, dtype=torch.bfloat16), torch.tensor(threshold * 1.5, dtype=torch.bfloat16)):
            assert weight + torch.tensor(rate, dtype=torch.bfloat16) == weight
        weight = torch.tensor(threshold * 1.5, dtype=torch.bfloat16)  # below a power of two the spacing halves
        assert weight - torch.tensor(rate, dtype=torch.bfloat16) == weight
        below = torch.tensor(threshold / 4, dtype=torch.bfloat16)
        assert below + torch.tensor(rate, dtype=torch.bfloat16) != below


# Each task's default model as its config.json builds it, at its real layer count (bert-base-cased: 12 layers;
# Qwen2.5-0.5B: 24, tied embeddings), narrowed as the host-tracing benchmark narrows it: transformers initializes
# every matrix with the same spread (initializer_range 0.02) at any width.
DEFAULT_ARCHITECTURE = {
    "text-classification": ("bert", {"num_hidden_layers": 12}),
    "causal-lm": ("qwen2", {"num_hidden_layers": 24, "num_key_value_heads": 2, "tie_word_embeddings": True}),
}
NARROW = {"hidden_size": 64, "intermediate_size": 256, "num_attention_heads": 4, "vocab_size": 1024}


def test_most_of_the_default_models_weights_lose_every_fine_tuning_update_in_pure_bf16():
    """docs/precision.md's "most of a model": at 2e-5, the share of the default architecture's weight elements at
    2**-7 or more as transformers initializes them (where pretraining starts; no pretrained checkpoint is reachable
    here)."""
    from transformers import AutoConfig

    from {{ cookiecutter.project_slug }}.tasks import task

    torch.manual_seed(0)
    kind, layers = DEFAULT_ARCHITECTURE[TASK]
    model = task.AUTO_MODEL.from_config(AutoConfig.for_model(kind, **layers, **NARROW))
    risk = bf16_updates.updates_at_risk(model, float(FINE_TUNING_RATE))
    elements = list(model.parameters())
    counted = sum(int((parameter.detach().abs() >= 2**-7).sum()) for parameter in elements)
    assert risk["fraction_of_elements"] == counted / sum(parameter.numel() for parameter in elements) > 0.5
