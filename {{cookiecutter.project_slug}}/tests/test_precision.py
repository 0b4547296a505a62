"""The precision policy: each level reaches the graph, is reported, and keeps the demo learning.

Each level runs in a fresh process: torch_xla reads its bf16 variables once per process.
"""

import json
import math
import os

import pytest
from conftest import PRECISION_FLAGS, QUICK, close_metrics, python_code, python_command, run

from {{ cookiecutter.project_slug }} import precision
from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig

LOWERING = """
import json, sys, torch_xla
from {{ cookiecutter.project_slug }} import precision
precision.set_xla_variables(sys.argv[1])
print(json.dumps(precision.lowered_types(torch_xla.device())))
"""


@pytest.mark.xla
@pytest.mark.parametrize("level", list(PRECISION_FLAGS))
def test_graph_holds_the_promised_types(level):
    result = run(python_code(LOWERING, level))
    assert tuple(json.loads(result.stdout.strip().splitlines()[-1])) == precision.PROMISED_TYPES[level]


@pytest.mark.xla
@pytest.mark.parametrize("level", list(PRECISION_FLAGS))
def test_report_and_learning_per_level(demo_report, level):
    """The default demo at each level: the report says what reached the graph, and it still learns."""
    report, _ = demo_report(level)
    promised = precision.PROMISED_TYPES[level]
    assert report["precision"] == {
        "requested": level,
        "effective": level,
        "via": {"fp32": "none", "bf16": "XLA_USE_BF16", "bf16+downcast": "XLA_DOWNCAST_BF16"}[level],
        "verified": f"f32->{promised[0]}, f64->{promised[1]} in graph",
        # What a TPU gets: Accelerate does not autocast there, and the project makes XLA:CPU do the same.
        "autocast": False,
    }
    assert math.isfinite(report["eval_loss"])
    assert close_metrics(report, demo_report("fp32")[0])


ACCELERATE_AUTOCAST = """
import json
from accelerate import Accelerator
from {{ cookiecutter.project_slug }} import precision
accelerator = Accelerator(mixed_precision="bf16")
print(json.dumps([str(accelerator.device), accelerator.native_amp, precision.decide_autocast(accelerator)]))
"""


@pytest.mark.xla
def test_the_project_not_accelerates_device_check_decides_autocast_on_xla():
    """Left to Accelerate, bf16 on XLA:CPU autocasts (a TPU does not): the CPU run would test other graphs."""
    result = run(python_code(ACCELERATE_AUTOCAST))
    device, accelerate_would, project_does = json.loads(result.stdout.strip().splitlines()[-1])
    assert device.startswith("xla")
    assert accelerate_would is True
    assert project_does is False


@pytest.mark.xla
def test_fallback_when_torch_xla_ignores_the_variables(tmp_path):
    """Variables set after the device is initialised are ignored: the model cast must take over, and say so."""
    code = f"""
import torch, torch_xla
torch.ones(2, device=torch_xla.device()) + 1
torch_xla.sync()
from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.training import training_function
training_function(config=parse({[*QUICK, "--mixed_precision", "bf16", "--output_dir", str(tmp_path)]!r}))
"""
    result = run(python_code(code))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["precision"]["requested"] == "bf16"
    assert report["precision"]["effective"] == "bf16 (model cast)"
    assert report["precision"]["via"] == "model.to(torch.bfloat16)"
    assert "XLA_USE_BF16 ignored" in report["precision"]["verified"]
    assert "precision: XLA_USE_BF16 ignored" in result.stdout
    assert math.isfinite(report["eval_loss"])


def test_downcast_without_bf16_is_refused_on_the_command_line():
    result = run(python_command("--mixed_precision", "no", "--downcast_bf16", "true"), check=False)
    assert result.returncode == 2
    assert "downcast_bf16=True needs mixed_precision=bf16" in result.stderr


def test_downcast_from_accelerate_launch_without_bf16_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DOWNCAST_BF16", "true")
    with pytest.raises(ConfigError, match="downcast_bf16 needs mixed_precision=bf16"):
        precision.requested_level(TrainConfig(mixed_precision="no"))


@pytest.mark.parametrize(
    ("env", "flags", "expected"),
    [
        ({"ACCELERATE_MIXED_PRECISION": "bf16", "ACCELERATE_DOWNCAST_BF16": "true"}, {}, "bf16+downcast"),
        ({"ACCELERATE_MIXED_PRECISION": "no"}, {}, "fp32"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, {"downcast_bf16": True}, "bf16+downcast"),
        ({"ACCELERATE_MIXED_PRECISION": "bf16"}, {"mixed_precision": "no"}, "fp32"),
        # On a TPU, `accelerate launch` sets only the XLA variables.
        ({"XLA_DOWNCAST_BF16": "1"}, {}, "bf16+downcast"),
        ({"XLA_USE_BF16": "1", "XLA_DOWNCAST_BF16": "0"}, {}, "bf16"),
        ({"XLA_USE_BF16": "1"}, {"mixed_precision": "no"}, "fp32"),
    ],
    ids=["launch-downcast", "launch-no", "flag-adds-downcast", "flag-wins", "tpu-launch-downcast", "tpu-launch-bf16",
         "flag-beats-tpu-launch"],
)
def test_accelerate_launch_settings_are_honoured(monkeypatch, env, flags, expected):
    for name in ("ACCELERATE_MIXED_PRECISION", "ACCELERATE_DOWNCAST_BF16", "XLA_USE_BF16", "XLA_DOWNCAST_BF16"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert precision.requested_level(TrainConfig(**flags)) == expected


def test_set_xla_variables_keeps_accelerate_consistent(monkeypatch):
    for name in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "ACCELERATE_DOWNCAST_BF16"):
        monkeypatch.setenv(name, "unset-by-test")  # so that monkeypatch restores the real value afterwards
    for level, variables in precision.XLA_VARIABLES.items():
        precision.set_xla_variables(level)
        assert {name: os.environ[name] for name in variables} == variables
        assert (os.environ.get("ACCELERATE_DOWNCAST_BF16") == "true") == (level == "bf16+downcast")
