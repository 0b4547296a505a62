"""The written contract of a layout (parallel/layout.py's `Layout`): both layouts derive from it and implement every
method with its arguments, and layout_for gives one for every --parallelism. Fast: nothing is built or trained."""

import inspect
from types import SimpleNamespace

import pytest

from {{ cookiecutter.project_slug }}.config import PARALLELISMS
from {{ cookiecutter.project_slug }}.parallel import layout_for
from {{ cookiecutter.project_slug }}.parallel.data import DataParallel
from {{ cookiecutter.project_slug }}.parallel.data_spmd import DataOverSpmd
from {{ cookiecutter.project_slug }}.parallel.fsdp import FsdpV2
from {{ cookiecutter.project_slug }}.parallel.layout import Layout

CONTRACT = sorted(Layout.__abstractmethods__)


def arguments(function) -> list[tuple]:
    """Each parameter's name, kind and default: what a caller relies on (the annotations may narrow, e.g. dict | None)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def departures(layout: type) -> list[str]:
    """Where `layout` departs from the contract: a method it lacks, or takes other arguments in."""
    found = []
    for name in CONTRACT:
        implemented = getattr(layout, name, None)
        if implemented is None or getattr(implemented, "__isabstractmethod__", False):
            found.append(f"{name}: not implemented")
        elif arguments(implemented) != arguments(getattr(Layout, name)):
            found.append(f"{name}{inspect.signature(implemented)}: the contract's is {inspect.signature(getattr(Layout, name))}")
    return found


def test_the_contract_names_what_the_loop_calls_and_says_each():
    # The methods the loop, the checkpoints and predict.py call on a layout (grep layout\.); a contract method without
    # its docstring says nothing of what the loop expects.
    assert CONTRACT == sorted([
        "start", "devices_per_process", "replicas", "loader_shards", "scheduler_calls_per_step", "wrap", "prepare",
        "clip_gradients", "train_batches", "eval_batches", "prepare_prediction", "save_state", "load_state",
        "host_state_dict", "plain_model", "describe", "release",
    ])
    assert [name for name in CONTRACT if not inspect.getdoc(getattr(Layout, name))] == []


@pytest.mark.parametrize("layout", [DataParallel, DataOverSpmd, FsdpV2])
def test_each_layout_implements_every_method_of_the_contract_with_its_arguments(layout):
    assert issubclass(layout, Layout)
    assert departures(layout) == []
    assert layout.name in PARALLELISMS
    assert layout.files  # what a resume compares (fault_tolerance/resume.py's REFUSED)
    assert DataOverSpmd.files != DataParallel.files  # their checkpoints differ: a resume across them is refused


def test_a_layout_that_departs_from_the_contract_is_named():
    class Partial(DataParallel):
        def replicas(self, accelerator, extra):
            return 1

    assert departures(Partial) == ["replicas(self, accelerator, extra): the contract's is (self, accelerator) -> int"]
    with pytest.raises(TypeError, match="abstract"):
        type("Missing", (Layout,), {})()  # and Python itself refuses a layout that lacks a method


@pytest.mark.parametrize("parallelism", PARALLELISMS)
def test_layout_for_gives_the_layout_each_parallelism_names(parallelism, monkeypatch):
    for name in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "PJRT_LOCAL_PROCESS_COUNT", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    layout = layout_for(SimpleNamespace(parallelism=parallelism), SimpleNamespace())
    assert isinstance(layout, Layout) and layout.name == parallelism


@pytest.mark.parametrize(("environment", "route"), [
    ({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}, DataOverSpmd),  # `python train.py` on a host of 4 chips
    ({"PJRT_DEVICE": "CPU"}, DataParallel),  # one chip
    ({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "PJRT_LOCAL_PROCESS_COUNT": "4"}, DataParallel),  # torch_xla's spawn
    ({"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "WORLD_SIZE": "2"}, DataParallel),  # accelerate launch, 2 processes
])
def test_the_data_layout_drives_every_chip_from_one_process_over_spmd(environment, route, monkeypatch):
    """Decided from the launcher's environment before the runtime starts (xla/runtime.py)."""
    pytest.importorskip("torch_xla")
    for name in ("PJRT_DEVICE", "CPU_NUM_DEVICES", "PJRT_LOCAL_PROCESS_COUNT", "LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert isinstance(layout_for(SimpleNamespace(parallelism="data"), SimpleNamespace()), route)  # or its --streaming kind
