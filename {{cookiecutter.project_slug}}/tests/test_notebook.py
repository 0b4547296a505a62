"""The notebook, executed end to end in a real Jupyter kernel, and its launch guard.

Each run starts a fresh kernel of this very interpreter (no `ipykernel install` needed)
in the project folder, shrinks the training through NOTEBOOK_OVERRIDES (the same quick
run as the other tests) and reads the report the main process wrote.
"""

import csv
import json
import math
import re
from dataclasses import asdict

import nbformat
import pytest
from conftest import METRIC, NO_XLA_PRELUDE, PROJECT, QUICK, child_env, eval_examples, free_port
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.config import TrainConfig

# Every test here executes the notebook: the launchers are the loop's machinery (tests/conftest.py).
pytestmark = [pytest.mark.machinery, pytest.mark.slow, pytest.mark.notebook]

NOTEBOOK = PROJECT / "train_on_tpu.ipynb"
KERNEL = "{{ cookiecutter.project_slug }}-test"
SHARED_MODEL = {{ cookiecutter.shared_model }}


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory):
    """A kernel spec that runs this interpreter, found only by these tests."""
    folder = tmp_path_factory.mktemp("kernels")
    write_kernel_spec(folder / KERNEL)
    return KernelSpecManager(kernel_dirs=[str(folder)])


def quick_overrides(output_dir, **extra) -> dict:
    """The test suite's QUICK command line as TrainConfig fields, plus launcher settings."""
    quick, default = asdict(parse(QUICK)), asdict(TrainConfig())
    changed = {name: value for name, value in quick.items() if value != default[name]}
    return {**changed, "mixed_precision": "no", "output_dir": str(output_dir), "use_port": free_port(), **extra}


def execute(kernel_specs, env, overrides, extra_cells=(), before="launch-why"):
    """Run every cell (extra_cells inserted before the cell with id `before`); return the notebook."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    position = next(index for index, cell in enumerate(notebook.cells) if cell.id == before)
    notebook.cells[position:position] = [nbformat.v4.new_code_cell(source) for source in extra_cells]
    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    client = NotebookClient(notebook, km=manager, timeout=600, resources={"metadata": {"path": str(PROJECT)}})
    client.execute(env={**env, "NOTEBOOK_OVERRIDES": json.dumps(overrides)})
    return notebook


def output_text(notebook, cell_id: str) -> str:
    cell = next(cell for cell in notebook.cells if cell.get("id") == cell_id)
    return "".join(output.get("text", "") for output in cell.outputs)


def eval_rows() -> int:
    from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES

    with open(DEMO_FILES["eval"], newline="", encoding="utf-8") as file:
        return sum(1 for _ in csv.DictReader(file))


def check_report(notebook, output_dir, device, distributed_type, num_processes):
    report = json.loads((output_dir / "report.json").read_text())
    assert report["device"] == device
    assert report["distributed_type"] == distributed_type
    assert report["num_processes"] == num_processes
    assert report["epochs"] == 1
    assert report["eval_examples_counted"] == eval_examples(64)
    assert math.isfinite(report[METRIC])
    shown = output_text(notebook, "report")
    assert METRIC in shown and f"{report[METRIC]:.4g}" in shown
    # Section 7: the export over the demo's eval file through predict.py's function, launched as training was.
    rows = [json.loads(line) for line in (output_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [row["row"] for row in rows] == list(range(eval_rows()))
    figures = json.loads((output_dir / "predictions.jsonl.report.json").read_text())
    assert (figures["processes"], figures["graphs"]) == (num_processes, None if device == "cpu" else 1)
    assert json.dumps(rows[0], ensure_ascii=False) in output_text(notebook, "predict")
    model_cell = output_text(notebook, "model")
    if SHARED_MODEL:
        assert "parameters, on cpu" in model_cell  # built once in the notebook's process, left on the host
    else:
        assert model_cell == ""
    return report


@pytest.mark.xla
@pytest.mark.layout("data")
def test_notebook_on_the_xla_cpu_device_in_one_process(kernel_specs, tmp_path):
    output_dir = tmp_path / "outputs"
    notebook = execute(kernel_specs, child_env(xla=True), quick_overrides(output_dir, num_processes=1))
    report = check_report(notebook, output_dir, "xla:CPU", "XLA", 1)
    assert report["xla_compilations"] >= 1


@pytest.mark.xla
@pytest.mark.layout("fsdp")
def test_notebook_runs_fsdp_in_its_own_process_on_four_devices(kernel_specs, tmp_path):
    """parallelism=fsdp: nothing forks; the kernel's process drives all four XLA devices (SPMD)."""
    output_dir = tmp_path / "outputs"
    env = child_env(xla=True, CPU_NUM_DEVICES="4")
    notebook = execute(kernel_specs, env, quick_overrides(output_dir, num_processes=1, parallelism="fsdp"))
    report = check_report(notebook, output_dir, "xla:CPU", "XLA", 1)
    assert report["layout"]["parallelism"] == "fsdp" and report["layout"]["mesh"] == {"fsdp": 4}


@pytest.mark.layout("data")
def test_notebook_forks_two_workers_on_the_plain_cpu(kernel_specs, tmp_path):
    """torch_xla hidden (a laptop): notebook_launcher forks two gloo workers that train as one run."""
    output_dir = tmp_path / "outputs"
    notebook = execute(
        kernel_specs, child_env(xla=False), quick_overrides(output_dir, num_processes=2),
        extra_cells=[NO_XLA_PRELUDE], before="install-why",
    )
    report = check_report(notebook, output_dir, "cpu", "MULTI_CPU", 2)
    assert report["xla_compilations"] is None


@pytest.mark.xla
def test_guard_stops_a_notebook_that_used_the_device(kernel_specs, tmp_path):
    """The guide's classic mistake: an Accelerator made in a notebook cell, before the launch.

    Also asked for: two processes, which torch_xla outside a Colab/Kaggle TPU cannot give.
    """
    output_dir = tmp_path / "outputs"
    mistake = "from accelerate import Accelerator\n\naccelerator = Accelerator()"
    if SHARED_MODEL:
        mistake += "\nmodel = model.to(accelerator.device)"
    with pytest.raises(CellExecutionError) as raised:
        execute(kernel_specs, child_env(xla=True), quick_overrides(output_dir, num_processes=2), extra_cells=[mistake])
    message = str(raised.value)
    assert "UnsafeLaunch" in message and "Cannot launch" in message
    assert "the XLA runtime was started" in message and "an Accelerator" in message
    assert ("the model is on xla:0" in message) == SHARED_MODEL
    assert re.search(r"\[\d+\] accelerator = Accelerator\(\)", message)  # names the cell to move
    assert "restart the runtime" in message
    assert "num_processes=2 outside a Colab/Kaggle TPU runtime" in message
    assert not (output_dir / "report.json").exists()


@pytest.mark.parametrize(
    "processes",
    [pytest.param(1, marks=pytest.mark.xla, id="xla-in-the-notebooks-process"),
     pytest.param(2, marks=[pytest.mark.workers, pytest.mark.layout("data")], id="two-forked-cpu-workers")],
)
def test_a_failed_run_raises_in_the_launch_cell(kernel_specs, tmp_path, local_model, processes):
    """A bad data file: the launch cell raises (and so does nbclient, papermill or a CI job running it)."""
    output_dir = tmp_path / "outputs"
    overrides = quick_overrides(
        output_dir, num_processes=processes, demo=False, model_name_or_path=str(local_model), dataset="files",
        train_file="/nonexistent.csv", eval_file="/nonexistent.csv",
    )
    xla = processes == 1
    extra = {"extra_cells": [NO_XLA_PRELUDE], "before": "install-why"} if not xla else {}
    with pytest.raises(CellExecutionError) as raised:
        execute(kernel_specs, child_env(xla=xla), overrides, **extra)
    message = str(raised.value)
    assert "notebook_launcher(training_function" in message  # the launch cell, not an earlier one
    assert "DataProblem" in message and "/nonexistent.csv: file not found" in message
    assert not (output_dir / "report.json").exists()
