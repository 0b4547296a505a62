"""Shared test helpers: run training in a fresh process and read its report.

Every training run gets its own process: torch_xla reads its bf16 variables and
builds its runtime once per process, so runs in one process would leak state.
Runs are forked from a fork server that imported the libraries once (forkserver.py), one for XLA runs and one for
runs with torch_xla hidden; TESTS_NO_FORKSERVER=1 starts each of them as a plain subprocess instead.
"""

import atexit
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from comparing import FORMS
from forkserver import ForkServer

PROJECT = Path(__file__).resolve().parent.parent
# Most of a short run's CPU time on XLA:CPU is compiling, and most of that is LLVM optimising the machine code XLA
# generates. The tests look at graphs, counts and metrics, not at speed: they compile without that optimisation
# (measured: a quick demo run's CPU time 22.5 s -> 16.2 s, its compile seconds 23.5 -> 10.8), and with XLA:CPU's older
# emitters for its fused loops instead of its fusion emitters (measured on 2 cores, a 6-step quick run at level 0:
# compile seconds 9.6-10.0 -> 5.7-6.0, a step 0.45-0.57 s -> 0.19-0.31 s, the run 31 s -> 24-26 s). Both change only
# the CPU backend's code generation, not the graphs. XLA_FLAGS set before the tests start wins flag for flag: with
# `XLA_FLAGS=--xla_cpu_max_isa=AVX2` every run compiles as a CPU without AVX-512 would (`make flaky`'s other-CPU run,
# docs/tests.md), with the tests' two flags beside it.
TESTS_LEVEL = "--xla_backend_optimization_level=0"
TESTS_XLA_FLAGS = f"{TESTS_LEVEL} --xla_cpu_use_fusion_emitters=false"


def with_tests_flags(given: str) -> str:
    """XLA_FLAGS as given, and each of the tests' own flags that it does not set."""
    named = {flag.partition("=")[0] for flag in given.split()}
    return " ".join([*given.split(), *(flag for flag in TESTS_XLA_FLAGS.split() if flag.partition("=")[0] not in named)])


os.environ["XLA_FLAGS"] = with_tests_flags(os.environ.get("XLA_FLAGS", ""))
# What imports set in a process's environment (torch_xla's defaults; scikit-learn's KMP_* at its import), as this
# process had them before any test imported them. A test that imports the package's tasks or scikit-learn in this
# process would pass them to every later run's environment (child_env copies os.environ); such a run differs from the
# fork server's environment and the server gives it to a plain subprocess: 5-6 s of imports instead of a fork (seen
# in make test: the default bake's suite took twice as long after in-process tests of models and metrics came).
IMPORT_VARIABLES = ("XLA_FLAGS", "GRPC_VERBOSITY", "TF_CPP_MIN_LOG_LEVEL", "PJRT_DYNAMIC_PLUGINS",
                        "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")
BEFORE_IMPORTS = {name: os.environ.get(name) for name in IMPORT_VARIABLES}
# This process's environment as the tests found it: filled before the first test (environment_the_tests_found).
AT_START = {}
# A long run (tens of steps) is the other way round: a step of the demo's model runs about twice as fast at LLVM's
# level 1 as at 0, for more than twice the compile seconds (measured on 2 cores, the default demo's 90 steps with the
# older emitters: 62 s at level 0, 48 s at level 1; a 6-step quick run 24-26 s -> 34.5 s). child_env(long=True) gives
# those runs level 1 unless XLA_FLAGS was set to something else; it is the level's only difference from the others
# (forkserver.py routes XLA_FLAGS to the forked run).
LONG_RUN_LEVEL = "--xla_backend_optimization_level=1"
CLI = "{{ cookiecutter.project_slug }}.cli"
XLA_AVAILABLE = importlib.util.find_spec("torch_xla") is not None
# A small, fast demo configuration for tests (the real demo uses the baked defaults). No test run may
# recompile after its warm-up unless it says so: a recompilation stops the run.
QUICK = ["--demo", "true", "--max_seq_length", "64", "--max_train_examples", "96", "--num_epochs", "1",
         "--max_recompilations", "0"]


# The task this project was generated for, the metric it reports besides the loss, and what the trained demo reaches.
TASK = "{{ cookiecutter.task }}"
METRIC = "eval_perplexity" if TASK == "causal-lm" else "eval_accuracy"
# The default demo (baked epochs and length): the classifier's accuracy, the language model's perplexity (its
# untrained perplexity, measured by test_causal_lm.py, is about the vocabulary's size: about 140).
DEMO_BAR = 40.0 if TASK == "causal-lm" else 0.9


def demo_learned(report) -> bool:
    return report[METRIC] <= DEMO_BAR if TASK == "causal-lm" else report[METRIC] >= DEMO_BAR


def close_metrics(report, other) -> bool:
    """Two runs that should learn about as well: accuracy within 0.05, or (language model) eval losses within 0.1
    nats, a perplexity within about 10% (measured: the bf16 demo ends 0.063 nats above the float32 one)."""
    if TASK == "causal-lm":
        return abs(report["eval_loss"] - other["eval_loss"]) <= 0.1
    return abs(report[METRIC] - other[METRIC]) <= 0.05


def eval_examples(max_seq_length: int) -> int:
    """Examples in the demo's eval set: its 120 texts, or (causal-lm) the packed blocks they make at this length."""
    if TASK != "causal-lm":
        return 120
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.tasks import task

    return len(task.load_examples(TrainConfig(demo=True, max_seq_length=max_seq_length), demo=True)[3])


# The README's first screen, in lines: what the project is and its four commands, each named by its comment.
FIRST_SCREEN = 40
FIRST_COMMANDS = ("install", "the demo", "your own data", "on a TPU")
ENTRY_POINTS = ("train.py", "{{ cookiecutter.project_slug }}.cli")


def load_script(name: str):
    """A module of scripts/ (not a package: the tests load it from its file), e.g. package_map or doc_paths."""
    spec = importlib.util.spec_from_file_location(name, PROJECT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_screen() -> dict[str, tuple[dict, list[str]]]:
    """The commands of the README's first bash block within its first screen, by what their comments say they do
    (FIRST_COMMANDS): each as (the variables it sets, its argv)."""
    lines = (PROJECT / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN]
    block = "\n".join(lines).partition("```bash\n")[2].partition("```")[0]
    commands = {}
    for line in block.splitlines():
        words, comment = shlex.split(line, comments=True), line.rpartition(" # ")[2].strip()
        role = next((role for role in FIRST_COMMANDS if comment.startswith(role)), comment)
        variables = [word for word in words if re.fullmatch(r"[A-Z_]+=\S*", word)]
        commands[role] = (dict(word.split("=", 1) for word in variables), words[len(variables):])
    return commands


def entry_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command split at its entry point (train.py, or -m the package's cli): (what starts it, the flags after)."""
    (at,) = [index for index, word in enumerate(argv) if word in ENTRY_POINTS]
    return argv[:at + 1], argv[at + 1:]


def readme_flags(role: str) -> list[str]:
    """The flags the README's first-screen command `role` gives its entry point; the user's own train.csv and
    eval.csv there are the demo's files here (demo-sized data)."""
    from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES

    yours = {"train.csv": str(DEMO_FILES["train"]), "eval.csv": str(DEMO_FILES["eval"])}
    return [yours.get(word, word) for word in entry_flags(first_screen()[role][1])[1]]


def quick(*extra) -> list[str]:
    """QUICK with flags replaced or added: quick("--num_epochs", "3")."""
    args = list(QUICK)
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


# Hide torch_xla from this interpreter and everything it imports: a laptop without it.
NO_XLA_PRELUDE = "import sys; sys.modules['torch_xla'] = None; "

# The door for the tests that interrupt a run (a signal, a kill): the run waits at a named point until the test has
# acted, so where it stops is an event the test chose, never a race against the steps after it. STEP_DOOR wraps the
# loop's own train_step (loop/fit.py calls it by that name): after this process's TEST_PAUSE_AT_STEP-th optimizer
# step, before that step's boundary (where the preemption callback reads its signals and the checkpoint schedule
# saves), the run makes the file paused-<rank> in the folder TEST_STEP_DOOR and waits there until the file `release`
# exists in it (the test makes it once it has acted). At most 300 s: a guard against a hang, never reached. A signal
# sent while it waits is noted by the run's handler and acted on at that very boundary.
STEP_DOOR = """
import os as _os, time as _time
from {{ cookiecutter.project_slug }}.loop import fit as _fit

def _through_the_door(original, taken=[]):
    def train_step(*args, **kwargs):
        result = original(*args, **kwargs)
        taken.append(None)
        if len(taken) == int(_os.environ.get("TEST_PAUSE_AT_STEP", "0")):
            door = _os.environ["TEST_STEP_DOOR"]
            open(_os.path.join(door, "paused-" + _os.environ.get("RANK", "0")), "w").close()
            release, deadline = _os.path.join(door, "release"), _time.monotonic() + 300
            while not _os.path.exists(release) and _time.monotonic() < deadline:
                _time.sleep(0.01)
        return result
    return train_step

_fit.train_step = _through_the_door(_fit.train_step)
"""

# The training command line, after any of the code above.
RUN_CLI = """
import runpy, sys
sys.argv = ["cli", *sys.argv[1:]]
runpy.run_module("{{ cookiecutter.project_slug }}.cli", run_name="__main__", alter_sys=True)
"""


class StepDoor:
    """The test's side of STEP_DOOR: the environment that makes a run wait after its `step`-th optimizer step, and
    the files that say it waits and release it."""

    def __init__(self, folder: Path, step: int):
        self.folder, self.step = folder, step
        folder.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict:
        return {"TEST_STEP_DOOR": str(self.folder), "TEST_PAUSE_AT_STEP": str(self.step)}

    def waiting(self, rank: int = 0) -> bool:
        return (self.folder / f"paused-{rank}").is_file()

    def release(self) -> None:
        (self.folder / "release").touch()


# The layout this project was generated for. A test trains at it unless it is about one layout (marked
# `layout("data")` or `layout("fsdp")`): such a test runs in a project of that layout. The loop's machinery (marked
# `machinery`: resume, several processes, the watch, launchers and the notebook, the loss guard, hosts) is the same for
# both tasks and runs in text-classification projects, in the data layout unless it is about the fsdp one (sharded
# checkpoints, hosts); a causal-LM project tests what its task changes. The template's `make test` runs four projects
# (each task in each layout), which together run every test once.
PARALLELISM = "{{ cookiecutter.parallelism }}"


def elsewhere(item) -> str | None:
    """Why this project does not run the test (None: it does)."""
    layout = item.get_closest_marker("layout")
    if layout and layout.args[0] != PARALLELISM:
        return f"about the {layout.args[0]} layout"
    machinery = item.get_closest_marker("machinery")
    if machinery:
        home = machinery.args[0] if machinery.args else "text-classification"  # machinery("causal-lm"): that task's
        if TASK != home:
            return f"machinery the {home} projects test"
        if not layout and PARALLELISM != "data":
            return "machinery the data-layout project tests"
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:  # a comparison of two runs says its form (tests/comparing.py), and what it compares
        for mark in item.iter_markers("compares"):
            if len(mark.args) != 2 or mark.args[0] not in FORMS or not mark.args[1]:
                raise pytest.UsageError(f"{item.nodeid}: compares(form, what) takes a form of {FORMS} and what it "
                                        f"compares, not {mark.args}")
    kept, moved = [], []
    for item in items:
        (moved if elsewhere(item) else kept).append(item)
    if moved:
        config.hook.pytest_deselected(items=moved)
        items[:] = kept


def pytest_report_header(config):
    machinery = "" if (TASK, PARALLELISM) == ("text-classification", "data") else " and the loop's machinery"
    return f"{TASK} project, {PARALLELISM} layout: the tests about the other layout{machinery} are deselected"


def restore_environment(before: dict) -> None:
    """os.environ as it was when `before` was taken: what was set since is gone, what was changed is back."""
    for name in set(os.environ) - set(before):
        del os.environ[name]
    os.environ.update(before)


@pytest.fixture(scope="session", autouse=True)
def environment_the_tests_found():
    """This process's environment once the test modules are imported, before the first test (the imports set some:
    torch_xla's sets TPU_LIBRARY_PATH). A fork server starts from it whenever it starts, so that nothing a test set in
    this process before (environment_as_it_was) becomes the server's own and differs from every later run's."""
    AT_START.update(os.environ)


@pytest.fixture(autouse=True)
def environment_as_it_was():
    """Each test leaves this process's environment as it found it. Code a test runs in this process sets variables
    that no monkeypatch undoes: test_plan.py's TPU compiler (xla/tpu_compile.py: ALLOW_MULTIPLE_LIBTPU_LOAD,
    TPU_WORKER_HOSTNAMES; jax's and libtpu's imports: TPU_LIBRARY_PATH, TPU_SKIP_MDS_QUERY). child_env copies the
    environment, so every later run differed from the fork server's and started as a plain subprocess, 5-9 s of
    imports each instead of a fork: every run after test_plan.py in a bake's suite."""
    before = dict(os.environ)
    yield
    restore_environment(before)


def pytest_runtest_setup(item):
    if item.get_closest_marker("xla") and not XLA_AVAILABLE:
        if os.environ.get("REQUIRE_XLA") == "1":
            pytest.fail("torch_xla is not installed but REQUIRE_XLA=1: this run must exercise the XLA path")
        pytest.skip("torch_xla is not installed (pip install -e '.[xla-cpu]' to run the XLA tests)")


def pytest_sessionfinish(session, exitstatus):
    """REQUIRE_NO_SKIPS=1 (CI's whole suite, docs/tests.md): a skipped test fails the run, since what it
    needs was to be installed; a green run then means every test ran."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if os.environ.get("REQUIRE_NO_SKIPS") == "1" and skipped and session.exitstatus == 0:
        reporter.write_line(f"REQUIRE_NO_SKIPS=1: {len(skipped)} test(s) skipped, the run fails: "
                            + "; ".join(report.nodeid for report in skipped), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def child_env(xla: bool = True, long: bool = False, base: dict | None = None, **extra) -> dict:
    """The environment of a run: with or without torch_xla, of tens of steps (`long`: LONG_RUN_LEVEL) or not,
    `extra` on top; from this process's environment now, or `base`."""
    started = {name: value for name, value in (os.environ if base is None else base).items()
               if name not in IMPORT_VARIABLES}
    started.update((name, value) for name, value in BEFORE_IMPORTS.items() if value is not None)
    env = {**started, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **extra}
    if xla:
        env.setdefault("PJRT_DEVICE", "CPU")
    else:
        env.pop("PJRT_DEVICE", None)
    flags = env.get("XLA_FLAGS", "").split()
    if long and TESTS_LEVEL in flags:  # the tests' own level (torch_xla's import appends its defaults to it)
        env["XLA_FLAGS"] = " ".join(LONG_RUN_LEVEL if flag == TESTS_LEVEL else flag for flag in flags)
    return env


class ForkableCommand(list):
    """`python -m module *args` or `python -c code *args`, with torch_xla importable (xla) or hidden: run() may fork
    it from a fork server. Any list made from it (a copy, a concatenation) is a plain command again, run as a
    subprocess."""

    def __init__(self, kind: str, target: str, args, xla: bool = True):
        if kind == "-c" and not xla:
            target = NO_XLA_PRELUDE + target
        super().__init__([sys.executable, kind, target, *args])
        self.kind, self.target, self.args, self.xla = kind, target, list(args), xla


def python_command(*args, module: str = CLI, xla: bool = True) -> list[str]:
    """A command running `module` with args, with torch_xla hidden when xla=False.

    Without torch_xla (a laptop) only the data layout runs: the command says so before its own flags, so that it also
    runs in an fsdp project (a --parallelism among `args` comes later and wins)."""
    if xla:
        return ForkableCommand("-m", module, args)
    args = ("--parallelism", "data", *args) if module == CLI else args
    code = f"import runpy; sys.argv = {[module, *args]!r}; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return ForkableCommand("-c", code, (), xla=False)


def python_code(code: str, *args, xla: bool = True) -> list[str]:
    """A command running a Python snippet, with torch_xla hidden when xla=False (or when the code hides it)."""
    hidden = not xla or code.startswith(NO_XLA_PRELUDE)
    return ForkableCommand("-c", code.removeprefix(NO_XLA_PRELUDE), args, xla=not hidden)


# What the fork server imports once: the libraries and the package's training loop, which a real run has imported
# before it first changes its own environment (precision/levels.py then sets XLA_USE_BF16, and transformers.modeling_utils,
# in that import, reads it at import time). peft, which a real run imports later, reads none of the variables set then.
FORK_PRELOAD = ("torch", "torch_xla", "transformers", "accelerate", "datasets", "peft",
                "{{ cookiecutter.project_slug }}.loop.training", "matplotlib.pyplot", "jax", "flax.nnx")
# What a run imports later, preloaded all the same because nearly every run pays for it (measured on 2 cores, a forked
# quick run of 10.2 s: jax and flax 1.9 s of it, for the JAX step; matplotlib 0.5 s, for curves.png). Neither reads a
# variable a run sets before it imports them (the JAX step sets jax's PRNG through jax.config; curves.py picks Agg
# with matplotlib.use, which works after pyplot's import, which picks no backend), they start no thread, and jax's
# import adds TPU_SKIP_MDS_QUERY=1 to the environment as it does in every run of the JAX step (read on a TPU only).
# Not torchax (0.3 s more): once imported it names torch's PrivateUse1 device, which a run of the lazy step must not
# see (xla/runtime.keep_torchax_out). The runs with torch_xla hidden (gloo workers) never take the JAX step.
XLA_ONLY = ("torch_xla", "jax", "flax.nnx")
# The only variables in which a forked run's environment may differ from the fork server's: checked, no module in
# FORK_PRELOAD reads them at import (torch_xla reads PJRT_DEVICE and CPU_NUM_DEVICES when its runtime starts; at
# import it only asks whether PJRT_DEVICE is set, and every XLA run sets it; fsspec, tqdm and networkx scan all the
# names for their own prefixes). A run that differs in anything else is a plain subprocess: a PYTHON* variable (read
# at interpreter start), HF_HUB_OFFLINE and the other HF_* (huggingface_hub and datasets read them at import),
# XLA_USE_BF16 and XLA_DOWNCAST_BF16 (torch_xla reads them when its runtime starts, transformers at import), XLA_FLAGS
# (read when the runtime starts, but torch_xla's import adds its own flag to it). The trackers' variables are read by
# wandb, trackio and transformers' integrations, which a run imports only when it reports to them (none is preloaded).
RUNTIME_VARIABLES = ("PJRT_DEVICE", "CPU_NUM_DEVICES", "PYTEST_CURRENT_TEST", "WANDB_DIR", "WANDB_MODE", "WANDB_SILENT",
                     "TRACKIO_DIR")
# With torch_xla hidden nothing reads PJRT_DEVICE; it is left out all the same (a run that sets it, asking for a TPU
# without torch_xla, is a plain subprocess).
NO_XLA_RUNTIME_VARIABLES = ("CPU_NUM_DEVICES", "PYTEST_CURRENT_TEST")
_fork_servers = {}


def fork_server(xla: bool = True):
    """The session's fork server for XLA runs or for runs with torch_xla hidden, started on first use (it takes a
    fresh process's imports, once)."""
    server = _fork_servers.get(xla)
    if server is None or not server.alive:
        env = {key: value for key, value in child_env(xla, base=AT_START or None).items()
               if key != "PYTEST_CURRENT_TEST" and not key.startswith("TEST_")}
        preload = FORK_PRELOAD if xla else tuple(name for name in FORK_PRELOAD if name not in XLA_ONLY)
        server = _fork_servers[xla] = ForkServer(PROJECT, env, preload, prelude="" if xla else NO_XLA_PRELUDE)
        atexit.register(server.close)
    return server


def forkable(command, env) -> bool:
    """A run that a fork server can run as a fresh process would: an XLA run (a device chosen) or one with
    torch_xla hidden, in the server's environment but for what may differ from run to run."""
    if not isinstance(command, ForkableCommand) or os.environ.get("TESTS_NO_FORKSERVER") == "1":
        return False
    # The tests' own switches (TEST_*) are read by the tests' code as the run goes.
    switches = tuple(key for key in env if key.startswith("TEST_"))
    if command.xla:
        return "PJRT_DEVICE" in env and XLA_AVAILABLE and fork_server().routable(env, RUNTIME_VARIABLES + switches)
    return fork_server(xla=False).routable(env, NO_XLA_RUNTIME_VARIABLES + switches)


def run(command, env=None, timeout=900, check=True) -> subprocess.CompletedProcess:
    env = env or child_env()
    if forkable(command, env):
        server = fork_server(command.xla)
        returncode, stdout, stderr = server.run(command, command.kind, command.target, command.args, env, timeout)
        result = subprocess.CompletedProcess(command, returncode, stdout, stderr)
    else:
        result = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def start(command, env, stdout: Path, stderr: Path):
    """A run started and left running, its output written to the files `stdout` and `stderr` as it goes: a fork
    (ForkServer.start: the server's next run ends it if it still runs) or a subprocess.Popen. The caller waits for it.
    One at a time: two started runs side by side (two hosts) are subprocess.Popen."""
    for log in (stdout, stderr):  # there from the start, for a caller that reads them while the run starts
        log.write_bytes(b"")
    if forkable(command, env):
        server = fork_server(command.xla)
        return server.start(command.kind, command.target, command.args, env, str(stdout), str(stderr))
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        return subprocess.Popen(command, cwd=PROJECT, env=env, stdout=out, stderr=err)


def train(tmp_path, *args, xla: bool = True, env=None, check=True):
    """Run the training command line in a fresh process; return (report dict or None, process)."""
    output = tmp_path / "outputs"
    command = python_command("--output_dir", str(output), *args, xla=xla)
    result = run(command, env=env or child_env(xla), check=check)
    report_file = output / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else None
    return report, result


@pytest.fixture
def run_training(tmp_path):
    def _run(*args, **kwargs):
        return train(tmp_path, *args, **kwargs)

    return _run


PRECISION_FLAGS = {
    "fp32": ["--mixed_precision", "no"],
    "bf16": ["--mixed_precision", "bf16", "--pure_bf16", "no"],  # the default: bf16 compute, float32 weights
}


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory):
    """The default demo (the README's demo command, with the precision level), run once per level and shared by all
    tests."""
    runs = {}

    def get(level):
        if level not in runs:
            folder = tmp_path_factory.mktemp(f"demo-{level.replace('+', '-')}")
            runs[level] = train(folder, *readme_flags("the demo"), *PRECISION_FLAGS[level], "--checkpoint", "false",
                                "--max_recompilations", "0", env=child_env(long=True))
        return runs[level]

    return get


# Several processes, as on a TPU VM or a pod, run here as gloo workers that notebook_launcher forks
# with torch_xla hidden (torch_xla 2.9 cannot run several processes on the CPU). The driver records
# the learning rate of every optimizer step in every process, and can give each process its own
# working folder: a relative output_dir then points at each "host's" own disk.
WORKERS = NO_XLA_PRELUDE + """
import json, os
from pathlib import Path
from accelerate import notebook_launcher
from {{ cookiecutter.project_slug }}.loop import fit, training
from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.parallel.data import DataParallel

processes, port, record, hosts, *argv = sys.argv[1:]
config, rates, original = parse(argv), [], fit.train_step
norms, clip = [], DataParallel.clip_gradients

def clip_recording(self, *args):
    norms.append(clip(self, *args))  # the global norm before clipping, read after the run
    return norms[-1]

DataParallel.clip_gradients = clip_recording
if os.environ.get("TEST_ONLY_MAIN_SEES_NO_HUB"):
    # Each process would answer differently: only the main process finds the hub out of reach.
    training.wants_demo = lambda data, model: os.environ.get("RANK", "0") == "0"

def recording(accelerator, parts, *args):
    rates.append(parts.optimizer.param_groups[0]["lr"])
    loss = original(accelerator, parts, *args)
    return loss

def run(model, config):
    rank = int(os.environ.get("RANK", "0"))
    Path(record, f"pid-{rank}").write_text(str(os.getpid()))
    if hosts:
        os.chdir(json.loads(hosts)[rank])
    try:
        training.training_function(model, config)
    finally:
        Path(record, f"process-{rank}.json").write_text(json.dumps(rates))
        Path(record, f"norms-{rank}.json").write_text(json.dumps([float(norm) for norm in norms]))

fit.train_step = recording  # the loop's own name for it (loop/fit.py)
notebook_launcher(run, (None, config), num_processes=int(processes), use_port=port)
"""


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def workers_command(folder, processes: int, *args, hosts=None, prelude: str = ""):
    """(command, folder where each process records its pid and learning rates, output_dir) of a gloo run; `prelude`:
    code run first (before the workers are forked)."""
    record = folder / "learning-rates"
    record.mkdir(parents=True, exist_ok=True)
    output = "outputs" if hosts else str(folder / "outputs")
    places = json.dumps([str(host) for host in hosts]) if hosts else ""
    # Gloo workers are the data layout (torch_xla is hidden from them), whatever the project's default layout.
    command = python_code(NO_XLA_PRELUDE + prelude + WORKERS.removeprefix(NO_XLA_PRELUDE), str(processes), str(free_port()), str(record), places, "--output_dir", output,
                          "--parallelism", "data", *args)
    return command, record


def recorded_rates(record) -> dict:
    return {int(path.stem.split("-")[1]): json.loads(path.read_text()) for path in record.glob("process-*.json")}


def train_in_workers(folder, processes: int, *args, hosts=None, check=True, prelude: str = ""):
    """Train in `processes` forked gloo workers; return (report or None, process, learning rates per process).

    Without `hosts`, output_dir is folder/outputs, shared by every worker. With `hosts` (one folder per
    process), output_dir is the relative "outputs": each worker has its own, like hosts with local disks.
    """
    command, record = workers_command(folder, processes, *args, hosts=hosts, prelude=prelude)
    result = run(command, env=child_env(xla=False), check=check)
    report_file = (Path(hosts[0]) if hosts else folder) / "outputs" / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else None
    return report, result, recorded_rates(record)


# A finished 2-epoch run (checkpoints epoch-1 and epoch-2) in this project's layout, 4 SPMD devices under fsdp: the
# tests of what a resume trusts (test_checkpoint_trust.py, test_safe_loading.py) damage or craft copies of it.
CHECKPOINTED_RUN = ["--demo", "true", "--max_seq_length", "32", "--max_train_examples", "64", "--train_batch_size", "4",
                    "--num_epochs", "2", "--mixed_precision", "no", "--compilation_cache", "false",
                    "--max_recompilations", "0"]


def checkpointed_env() -> dict:
    return spmd_env(4) if PARALLELISM == "fsdp" else child_env()


@pytest.fixture(scope="session")
def checkpointed_run(tmp_path_factory) -> Path:
    """CHECKPOINTED_RUN's output_dir (tests copy it before they change anything)."""
    folder = tmp_path_factory.mktemp("checkpointed")
    train(folder, *CHECKPOINTED_RUN, env=checkpointed_env())
    return folder / "outputs"


@pytest.fixture(scope="session")
def local_model(tmp_path_factory) -> Path:
    """A model folder as `save_pretrained` writes it (the demo's tiny BERT and tokenizer): no hub needed."""
    from {{ cookiecutter.project_slug }}.config import TrainConfig
    from {{ cookiecutter.project_slug }}.data.tokenizer import load_tokenizer
    from {{ cookiecutter.project_slug }}.tasks import task

    folder = tmp_path_factory.mktemp("local-model")
    config = TrainConfig(demo=True)
    tokenizer = load_tokenizer(config.data, config.model, demo=True)
    task.build_model(config, demo=True, vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# One training run in this process (any layout) that also records every step's training loss (and, beside it, its
# gradient norm before clipping). The losses are
# read after training, so recording adds neither a graph nor a transfer to the run's report.
RECORDING = """
import json, sys
from {{ cookiecutter.project_slug }}.loop import fit
from {{ cookiecutter.project_slug }}.cli import main

record, *argv = sys.argv[1:]
losses, original = [], fit.train_step
fit.train_step = lambda *args: losses.append(original(*args)) or losses[-1]
try:
    main(argv)
finally:
    with open(record, "w") as out:
        json.dump([step.loss.item() for step in losses], out)
    with open(record + ".norms", "w") as out:  # each step's gradient norm before clipping, when it clipped
        json.dump([step.grad_norm.item() for step in losses if step.grad_norm is not None], out)
"""


# One training run in this process (any layout) that also records the global norm every clip computed (before
# clipping), read after the run: reading it during the run would be a transfer per step.
NORMS = """
import json, sys
from {{ cookiecutter.project_slug }}.cli import main
from {{ cookiecutter.project_slug }}.parallel.data import DataParallel
from {{ cookiecutter.project_slug }}.parallel.fsdp import FsdpV2

record, *argv = sys.argv[1:]
norms = []
for layout in (DataParallel, FsdpV2):
    def recording(self, *args, original=layout.clip_gradients):
        norms.append(original(self, *args))
        return norms[-1]
    layout.clip_gradients = recording
try:
    main(argv)
finally:
    with open(record, "w") as out:
        json.dump([float(norm) for norm in norms], out)
"""


def train_recording_losses(folder, *args, env=None, check=True):
    """(report or None, process, the loss of every optimizer step) of a run of the command line."""
    record = folder / "losses.json"
    output = folder / "outputs"
    result = run(python_code(RECORDING, str(record), "--output_dir", str(output), *args), env=env or child_env(), check=check)
    report_file = output / "report.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else None
    return report, result, json.loads(record.read_text()) if record.exists() else None


def resumed_from_step(uninterrupted: Path, output: Path, step: int, *args) -> subprocess.CompletedProcess:
    """The run of `args` in `output`, resumed from the step-`step` checkpoint of the run in `uninterrupted`."""
    import shutil

    from {{ cookiecutter.project_slug }}.fault_tolerance.checkpointing import LATEST

    checkpoints = output / "checkpoints"
    shutil.copytree(uninterrupted / "checkpoints" / f"step-{step}", checkpoints / f"step-{step}")
    (checkpoints / LATEST).write_text(f"step-{step}")
    return run(python_command("--output_dir", str(output), *args, "--resume", "true"))


def assert_same_weights_and_optimizer_state(found: Path, expected: Path) -> None:
    """Two checkpoints hold the same weights and the same optimizer state, bit for bit."""
    import torch

    for name in ("pytorch_model.bin", "optimizer.bin"):
        loaded = [torch.load(folder / name, map_location="cpu", weights_only=True) for folder in (found, expected)]
        if name == "optimizer.bin":
            loaded = [{(index, key): value for index, state in checkpoint["state"].items()
                       for key, value in state.items()} for checkpoint in loaded]
        assert loaded[0].keys() == loaded[1].keys(), name
        for key, value in loaded[1].items():
            assert torch.equal(torch.as_tensor(loaded[0][key]), torch.as_tensor(value)), f"{name}: {key} differs"


def spmd_env(devices: int, long: bool = False) -> dict:
    """XLA on the CPU with `devices` devices in one process (the fsdp layout's SPMD mesh); `long`: as child_env."""
    return child_env(long=long, PJRT_DEVICE="CPU", CPU_NUM_DEVICES=str(devices))


def evaluate_on_cpu(model, tokenizer, eval_examples, max_seq_length: int) -> dict:
    """The task's eval metrics of `model` on the plain CPU in float32 (the package's host evaluation)."""
    from {{ cookiecutter.project_slug }}.loop.host_evaluation import evaluate_on_host

    return evaluate_on_host(model, tokenizer, eval_examples, max_seq_length)
