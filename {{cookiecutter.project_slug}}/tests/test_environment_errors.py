"""A broken or mismatched stack ends in one line naming the fix, not a trace from inside the runtime.

The cases a laptop or a fresh TPU VM really hits: PJRT_DEVICE=TPU without a TPU, without
torch_xla, without libtpu (the [tpu] extra), and a torch/torch_xla pair that does not match.
What this machine cannot be (a TPU VM, a mismatched install) is simulated in-process by
patching what `environment.check_stack` reads; the rest runs the real command line.
"""

import importlib.metadata
import sys

import pytest
from conftest import child_env, python_command, run

from {{ cookiecutter.project_slug }} import cli
from {{ cookiecutter.project_slug }}.launch import environment
from {{ cookiecutter.project_slug }}.launch.environment import EnvironmentProblem

ARGS = ["--demo", "true", "--num_epochs", "1"]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def fake_versions(monkeypatch, **releases):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: releases.get(name) or real(name))


@pytest.mark.xla
def test_tpu_requested_on_a_machine_without_one(tmp_path):
    if environment.tpu_device_files():  # libtpu alone (the plan extra) is no TPU
        pytest.skip("this machine has a TPU")
    output = tmp_path / "outputs"
    result = run(python_command("--output_dir", str(output), *ARGS), env=child_env(PJRT_DEVICE="TPU"), check=False)
    assert result.returncode == 2
    error = one_error_line(result.stderr)
    assert error.startswith("error: PJRT_DEVICE=TPU but this machine has no TPU")
    assert "set PJRT_DEVICE=CPU" in error
    assert not output.exists(), "nothing may be written before the stack is checked"


def test_tpu_requested_without_torch_xla(tmp_path):
    result = run(
        python_command("--output_dir", str(tmp_path / "outputs"), *ARGS, xla=False),
        env={**child_env(xla=False), "PJRT_DEVICE": "TPU"}, check=False,
    )
    assert result.returncode == 2
    assert one_error_line(result.stderr) == (
        "error: PJRT_DEVICE=TPU but torch_xla is not installed: run `pip install -e '.[tpu]'` on the TPU host"
    )


def test_torch_and_torch_xla_releases_must_match(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(environment, "xla_installed", lambda: True)
    fake_versions(monkeypatch, torch="2.9.0+cu128", torch_xla="2.8.0")
    with pytest.raises(EnvironmentProblem) as refused:
        environment.check_stack()
    assert str(refused.value) == (
        "torch 2.9.0 does not match torch_xla 2.8.0: "
        "install the pair together, e.g. `pip install torch==2.8.0 'torch_xla[tpu]==2.8.0'`"
    )
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--output_dir", str(tmp_path / "outputs"), *ARGS])
    assert stopped.value.code == 2
    assert one_error_line(capsys.readouterr().err) == f"error: {refused.value}"


def test_torch_xla_that_cannot_be_imported(monkeypatch):
    """A pair built for each other but broken (an ABI mismatch shows up as an ImportError on import)."""
    monkeypatch.setattr(environment, "xla_installed", lambda: True)
    fake_versions(monkeypatch, torch="2.9.0", torch_xla="2.9.0")
    monkeypatch.setitem(sys.modules, "torch_xla", None)
    with pytest.raises(EnvironmentProblem, match=r"^torch_xla 2\.9\.0 cannot be imported with torch 2\.9\.0 \(.*\): "
                       r"install the pair together"):
        environment.check_stack()


@pytest.mark.xla
def test_tpu_vm_without_the_tpu_extra(monkeypatch, tmp_path, capsys):
    """A TPU VM (chips visible) where libtpu, which `pip install -e '.[tpu]'` brings, is missing."""
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setattr(environment, "tpu_device_files", lambda: ["/dev/vfio/0"])
    monkeypatch.setattr(environment, "libtpu_installed", lambda: False)
    with pytest.raises(EnvironmentProblem) as refused:
        environment.check_stack()
    assert str(refused.value) == (
        "PJRT_DEVICE=TPU but libtpu is not installed (the [tpu] extra is missing): run `pip install -e '.[tpu]'`"
    )
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--output_dir", str(tmp_path / "outputs"), *ARGS])
    assert stopped.value.code == 2
    assert one_error_line(capsys.readouterr().err) == f"error: {refused.value}"


@pytest.mark.xla
def test_a_sound_stack_passes(monkeypatch):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    environment.check_stack()
