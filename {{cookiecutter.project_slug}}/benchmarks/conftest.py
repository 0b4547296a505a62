"""pytest wiring for the benchmarks: the profile switch, the forked measurements, the reports.

Options (or variables): --bench-profile quick|full|data|quality (BENCH_PROFILE; quick by default; data runs the "data
at size" group alone, at every size; quality the "trains as well as the Trainer" group alone) and
--bench-results FOLDER (BENCH_RESULTS; benchmark-results/ by default). The option is not
called --profile because pytest-profiling already owns that name.

Every benchmark in this folder that uses pytest-benchmark's `benchmark` fixture, including
ones added later, is collected into results.md, results.png and the summary printed at the
end: each scalar of its `extra_info` becomes a column, and `extra_info["headline"]` names
the figure to plot.
"""

import importlib.util
import os
import time
from pathlib import Path

import pytest

from . import isolation, page, profiles, reports, results_file
from .records import Record

RECORDS = pytest.StashKey[list]()
WRITTEN = pytest.StashKey[dict]()
STARTED = pytest.StashKey[float]()
RESULTS_VARIABLE = "BENCH_RESULTS"
# The profiles that run one module alone, and that module. The quality group (40 minutes) runs in its own profile only;
# the plan group runs narrowed in the quick one too.
ALONE = {"data": "test_data_at_size.py", "quality": "test_quality.py", "plan": "test_plan_accuracy.py",
         "compile": "test_compile_time.py"}
ONLY_ALONE = ALONE["quality"]

# Forked children must not inherit a tokenizer thread pool, and nothing here downloads.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_addoption(parser):
    group = parser.getgroup("benchmarks", "the project's reference benchmarks")
    group.addoption("--bench-profile", choices=("quick", "full", "data", "quality", "plan", "compile"), default=None,
                    help=f"quick (default, CI), full (a TPU host), data (the data-at-size group alone, every size), "
                         f"quality (the trains-as-well-as-the-Trainer group alone), plan (the plan against the "
                         f"TPU compiler, the default model at its real size) or compile (the step's compile time at "
                         f"the default model's real layer count, its layers scanned or not); "
                         f"also ${profiles.PROFILE_VARIABLE}")
    group.addoption("--bench-results", default=None,
                    help=f"folder for results.md and results.png (default benchmark-results/; also ${RESULTS_VARIABLE})")


def pytest_configure(config):
    config.stash[RECORDS] = []
    config.stash[STARTED] = time.monotonic()
    # pytest-benchmark writes its JSON before any other plugin's end-of-session hook could make the folder.
    saved = config.getoption("benchmark_json", None)
    if saved:
        Path(saved).parent.mkdir(parents=True, exist_ok=True)


def pytest_ignore_collect(collection_path, config):
    """The data and quality profiles each collect their one module alone; the others never collect the quality one."""
    benchmark_module = collection_path.parent == Path(__file__).parent and collection_path.match("test_*.py")
    if benchmark_module:
        alone = ALONE.get(profiles.choose(config.getoption("--bench-profile")).name)
        if alone:
            return collection_path.name != alone or None
        return collection_path.name == ONLY_ALONE or None
    return None


@pytest.fixture(scope="session")
def profile(pytestconfig) -> profiles.Profile:
    return profiles.choose(pytestconfig.getoption("--bench-profile"))


@pytest.fixture(scope="session", autouse=True)
def xla_parent(profile):
    """Load the heavy imports once, in a parent that never touches a device, for every child to inherit, with the
    profile's XLA flags on the XLA CPU device (after torch_xla's import, which adds its own defaults to XLA_FLAGS)."""
    if importlib.util.find_spec("torch_xla") is None:
        message = "torch_xla is not installed: the benchmarks measure XLA (pip install -e '.[xla-cpu]' or '.[tpu]')"
        if os.environ.get("REQUIRE_XLA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    isolation.preload()
    if profile.cpu_xla_flags and os.environ.get("PJRT_DEVICE") == "CPU":
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {profile.cpu_xla_flags}".strip()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    outcome = "failed"
    try:
        result = yield
        outcome = "passed"
        return result
    except pytest.skip.Exception:
        outcome = "skipped"
        raise
    finally:
        _record(item, outcome)


def _record(item, outcome: str) -> None:
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    if fixture is None:
        return
    stats = getattr(getattr(fixture, "stats", None), "stats", None)
    callspec = getattr(item, "callspec", None)
    item.config.stash[RECORDS].append(Record(
        group=getattr(fixture, "group", None) or item.module.__name__.rpartition(".")[2],
        name=callspec.id if callspec else item.name,
        outcome=outcome,
        wall_s=getattr(stats, "median", None),
        extra_info=dict(fixture.extra_info),
    ))


def results_folder(config) -> Path:
    chosen = config.getoption("--bench-results") or os.environ.get(RESULTS_VARIABLE)
    return Path(chosen) if chosen else Path(config.rootpath) / "benchmark-results"


def title(config, records) -> str:
    devices = sorted({str(r.extra_info["device"]) for r in records if r.extra_info.get("device")}) or ["unknown device"]
    return f"Benchmark results ({profiles.choose(config.getoption('--bench-profile')).name} profile, {', '.join(devices)})"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    records = session.config.stash[RECORDS]
    if records:
        folder = results_folder(session.config)
        written = reports.write(records, folder, title(session.config, records))
        # The run as one results file, and the page drawn from it with the reference's answers beside its own.
        saved = results_file.save(records, folder, wall_s=time.monotonic() - session.config.stash[STARTED],
                                  profile=profiles.choose(session.config.getoption("--bench-profile")).name)
        beside = page.reference_beside(Path(session.config.rootpath), saved)
        written.update({"results": saved, **page.write(results_file.load(saved), folder, reference=False, beside=beside)})
        session.config.stash[WRITTEN] = written


def pytest_terminal_summary(terminalreporter, config):
    records = config.stash.get(RECORDS, [])
    if not records:
        return
    terminalreporter.section(title(config, records))
    for line in reports.summary(records):
        terminalreporter.write_line(line)
    for kind, path in config.stash.get(WRITTEN, {}).items():
        terminalreporter.write_line(f"{kind}: {path}")
