"""Launching: the Accelerate configs, `accelerate launch` on the CPU's XLA device, the pod script, CI.

The README and docs/ are the contract: the workflows must run the commands they give, so CI
tests what a newcomer types.
"""

import importlib.util
import json
import re
import shlex
import sys

import psutil
import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType
from conftest import NO_XLA_PRELUDE, PROJECT, QUICK, child_env, eval_examples, run

BAKED = {
    "mixed_precision": {{ cookiecutter.mixed_precision | tojson }},
    "pure_bf16": {{ cookiecutter.pure_bf16 | tojson }},
    "num_processes": {{ cookiecutter.num_processes | int }},
    "parallelism": {{ cookiecutter.parallelism | tojson }},
}
# Every config file and the processes it asks for: one on the CPU (torch_xla cannot run more there).
CONFIG_PROCESSES = {"tpu-vm.yaml": BAKED["num_processes"], "xla-cpu.yaml": 1}
ENTRY = ["train.py"] if (PROJECT / "train.py").exists() else ["-m", "{{ cookiecutter.project_slug }}.cli"]
XPK_VERSION = "1.16.0"  # the template's own xpk pin (its tools/xpk-requirements.txt; its tests/test_pins.py compares)
POD_ARGS = ["--tpu-name", "my-pod", "--zone", "us-central2-b", "--project", "my-project"]
POD_VARIABLES = {"TPU_NAME": "my-pod", "ZONE": "us-central2-b", "PROJECT_ID": "my-project"}


def load_pod_script():
    spec = importlib.util.spec_from_file_location("launch_pod", PROJECT / "scripts" / "launch_pod.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pod_dry_run(*args, **variables):
    env = {key: value for key, value in child_env().items() if key not in POD_VARIABLES}
    command = [sys.executable, str(PROJECT / "scripts" / "launch_pod.py"), *args]
    return run(command, env={**env, **variables}, timeout=60, check=False)


def remote_command(gcloud_argv: list[str]) -> list[str]:
    (command,) = [arg.removeprefix("--command=") for arg in gcloud_argv if arg.startswith("--command=")]
    return shlex.split(command)


def baked_level() -> str:
    if BAKED["mixed_precision"] == "no":
        return "fp32"
    return "bf16" if BAKED["pure_bf16"] == "no" else f"pure-bf16-{BAKED['pure_bf16']}"


# ---- Accelerate configs -------------------------------------------------------------------


def test_every_config_file_is_covered():
    assert sorted(path.name for path in (PROJECT / "configs").glob("*.yaml")) == sorted(CONFIG_PROCESSES)


@pytest.mark.parametrize("name", sorted(CONFIG_PROCESSES))
def test_config_loads_with_accelerates_loader_and_holds_the_baked_answers(name):
    config = load_config_from_file(str(PROJECT / "configs" / name))
    assert config.distributed_type == DistributedType.XLA
    # "no": the script decides the precision. bf16 here would make Accelerate's TPU launcher set XLA_USE_BF16=1.
    assert config.mixed_precision == "no"
    assert config.downcast_bf16 is False
    assert config.num_processes == CONFIG_PROCESSES[name]
    assert config.num_machines == 1
    # Pods go through scripts/launch_pod.py: Accelerate's cluster launcher needs a module torch_xla 2.1 removed.
    assert config.tpu_use_cluster is False
    assert config.main_training_function == "main"


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
def test_accelerate_launch_with_the_local_config_trains_the_demo_on_xla_cpu(tmp_path):
    output = tmp_path / "outputs"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/xla-cpu.yaml",
        *ENTRY, "--output_dir", str(output), *QUICK,
    ]
    run(command, env=child_env(PJRT_DEVICE="CPU"))
    report = json.loads((output / "report.json").read_text())
    assert report["distributed_type"] == "XLA"
    assert report["device"] == "xla:CPU"
    assert report["num_processes"] == 1
    assert report["eval_examples_counted"] == eval_examples(64)  # the demo's eval set, padding masked out
    # The config file says "no"; the script's baked default decides.
    assert report["precision"]["requested"] == baked_level()


BAD_DATA = ["--dataset", "files", "--train_file", "/nonexistent.csv", "--eval_file", "/nonexistent.csv"]
BAD_DATA_ERROR = "error: /nonexistent.csv: file not found"


def launch(*args, env):
    return run([sys.executable, "-m", "accelerate.commands.launch", *args], env=env, check=False)


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
def test_a_failed_run_exits_non_zero_through_accelerate_launch_on_xla(tmp_path):
    """Accelerate's XLA launcher calls main() itself and drops its return value: the failure must raise."""
    result = launch("--config_file", "configs/xla-cpu.yaml", *ENTRY, "--output_dir", str(tmp_path), *BAD_DATA,
                    env=child_env(PJRT_DEVICE="CPU"))
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [BAD_DATA_ERROR]


@pytest.mark.xla
@pytest.mark.machinery
@pytest.mark.slow
# One bad flag through the launcher (each launch costs about 10 s): the messages of the others are tested in-process
# (test_cli, test_metrics_log, test_schedules); what this adds is that exit 2 and the one line survive the launcher.
@pytest.mark.parametrize(("given", "said"), [
    (["--lr", "1e-4"], "unknown option --lr: did you mean --learning_rate?"),
])
def test_a_bad_flag_is_one_line_and_exit_status_2_through_accelerate_launch_on_xla(tmp_path, given, said):
    output = tmp_path / "outputs"
    result = launch("--config_file", "configs/xla-cpu.yaml", *ENTRY, "--output_dir", str(output), *given,
                    env=child_env(PJRT_DEVICE="CPU"))
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if "error: " in line][-1].endswith(f"error: {said}")
    assert "Traceback" not in result.stderr
    assert not output.exists()


@pytest.mark.workers
@pytest.mark.machinery
@pytest.mark.slow
@pytest.mark.layout("data")
def test_a_failed_run_exits_non_zero_through_accelerate_launch_with_two_cpu_processes(tmp_path):
    """torchrun starts two workers (MULTI_CPU, gloo); torch_xla is hidden in each by a sitecustomize. The main process
    refuses the data while the other waits for it (main_process_first): both stop there with status 2, whichever
    leaves first, and the folder the run made is gone."""
    hide = tmp_path / "hide-torch-xla"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(NO_XLA_PRELUDE + "\n")
    env = child_env(xla=False, PYTHONPATH=str(hide))
    command = ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", *ENTRY, "--output_dir", str(tmp_path / "outputs")]
    result = launch(*command, *BAD_DATA, env=env)
    assert result.returncode != 0
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [BAD_DATA_ERROR]
    # torchrun's summary: each worker it saw fail, with the refusal's status (not a gloo error's 1, nor SIGABRT's -6).
    statuses = re.findall(r"exitcode  : (-?\d+)", result.stderr)
    assert statuses and set(statuses) == {"2"}, result.stderr[-3000:]
    assert result.stderr.count("Traceback") == 1, result.stderr[-3000:]  # torchrun's own ChildFailedError, no worker's
    assert "terminate called" not in result.stderr
    assert not (tmp_path / "outputs").exists()
    # The same launch trains when the data is fine: the failure above is the data's, not the launcher's.
    trained = launch(*command, *QUICK, "--mixed_precision", "no", "--checkpoint", "false", env=env)
    assert trained.returncode == 0, trained.stderr[-3000:]
    report = json.loads((tmp_path / "outputs" / "report.json").read_text())
    assert (report["distributed_type"], report["num_processes"]) == ("MULTI_CPU", 2)


# ---- pod launch script --------------------------------------------------------------------


def test_pod_dry_run_prints_the_gcloud_commands_for_all_workers():
    result = pod_dry_run(*POD_ARGS, "--workers", "2", "--dry-run", "--", "--num_epochs", "2", "--dataset", "glue/sst2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    commands = [shlex.split(line) for line in lines]
    verbs = ("ssh", "scp", "ssh", "ssh", "ssh")
    assert [argv[:5] for argv in commands] == [["gcloud", "compute", "tpus", "tpu-vm", verb] for verb in verbs]
    workers = ["--worker=all"] * 3 + ["--worker=0", "--worker=1"]
    for argv, worker in zip(commands, workers, strict=True):
        assert argv[-5:] == ["--zone", "us-central2-b", "--project", "my-project", worker]
    mkdir, copy, install, train, train_on_worker_1 = commands
    assert remote_command(train_on_worker_1) == remote_command(train)
    assert remote_command(mkdir) == ["mkdir", "-p", "{{ cookiecutter.project_slug }}"]
    assert copy[5] == "--recurse" and copy[-6] == "my-pod:{{ cookiecutter.project_slug }}"
    needed = {"configs", "constraints.txt", "data", "pyproject.toml", "scripts", "{{ cookiecutter.project_slug }}"}
    assert needed | ({"train.py"} if ENTRY == ["train.py"] else set()) <= set(copy)
    assert remote_command(install) == ["cd", "{{ cookiecutter.project_slug }}", "&&", "python3", "-m", "pip", "install", "-e", ".[tpu]", "-c", "constraints.txt"]
    # data: Accelerate's launcher starts a process per chip; fsdp: one plain process per host.
    launcher = ["-m", "accelerate.commands.launch", "--config_file", "configs/tpu-vm.yaml"]
    if BAKED["parallelism"] == "fsdp":
        launcher = []
    assert remote_command(train) == [
        "cd", "{{ cookiecutter.project_slug }}", "&&", "PJRT_DEVICE=TPU", "python3", *launcher, *ENTRY, "--num_epochs", "2",
        "--dataset", "glue/sst2",
    ]



@pytest.mark.parametrize("choice", [["--parallelism", "fsdp"], ["--parallelism=fsdp"]])
def test_pod_dry_run_starts_one_plain_process_per_host_for_fsdp(choice):
    """SPMD: one process per host drives all its chips; Accelerate's launcher would start one per chip."""
    result = pod_dry_run(*POD_ARGS, "--workers", "2", "--dry-run", "--no-install", "--", *choice, "--num_epochs", "2")
    assert result.returncode == 0, result.stderr
    *_, train, train_on_worker_1 = [shlex.split(line) for line in result.stdout.strip().splitlines()]
    assert remote_command(train) == remote_command(train_on_worker_1) == [
        "cd", "{{ cookiecutter.project_slug }}", "&&", "PJRT_DEVICE=TPU", "python3", *ENTRY, *choice, "--num_epochs", "2",
    ]


def test_pod_entry_predict_starts_predict_py_on_every_host_as_training_starts():
    flags = ["--model", "outputs/model", "--input", "in.csv", "--output", "out.csv"]
    commands = {}
    for entry in ("train", "predict"):
        result = pod_dry_run(*POD_ARGS, "--workers", "2", "--dry-run", "--no-install", "--entry", entry, "--", *flags)
        assert result.returncode == 0, result.stderr
        commands[entry] = [remote_command(shlex.split(line)) for line in result.stdout.strip().splitlines()[-2:]]
    for trained, predicted in zip(commands["train"], commands["predict"], strict=True):
        at = trained.index(ENTRY[-1])
        assert predicted == [*trained[:at + 1 - len(ENTRY)], "predict.py", *flags]


def test_pod_script_follows_the_baked_parallelism():
    result = pod_dry_run(*POD_ARGS, "--workers", "1", "--dry-run", "--no-install")
    train = remote_command(shlex.split(result.stdout.strip().splitlines()[-1]))
    assert ("accelerate.commands.launch" in train) == (BAKED["parallelism"] == "data"), train

FAKE_GCLOUD = """#!/usr/bin/env python3
# Stands in for gcloud: a pod of three hosts where training fails on worker 1 and the others wait.
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if "describe" in args:
    print(json.dumps({"networkEndpoints": [{"ipAddress": "10.0.0.%d" % i} for i in range(3)]}))
    sys.exit(0)
worker = next(arg for arg in args if arg.startswith("--worker=")).split("=")[1]
if any(arg.startswith("--command=") and ("train.py" in arg or ".cli" in arg) for arg in args):  # training
    if worker == os.environ["FAKE_FAILING_WORKER"]:
        print("error: /data/train.csv: file not found", file=sys.stderr)
        sys.exit(2)
    with open(os.environ["FAKE_GCLOUD_WAITING"], "a") as waiting:
        waiting.write("%d\\n" % os.getpid())
    print("training", flush=True)
    time.sleep(120)  # a healthy host waits for the failed one in its next collective
"""


def test_pod_script_names_the_failed_host_stops_the_others_and_exits_with_its_status(tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "gcloud.log"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
    (bin_dir / "gcloud").chmod(0o755)
    waiting = tmp_path / "waiting"
    env = {**child_env(), "PATH": f"{bin_dir}:{child_env()['PATH']}", "FAKE_GCLOUD_LOG": str(log),
           "FAKE_FAILING_WORKER": "1", "FAKE_GCLOUD_WAITING": str(waiting)}
    # The healthy hosts sleep 120 s: the script returns within the timeout only if it stopped them.
    result = run([sys.executable, str(PROJECT / "scripts" / "launch_pod.py"), *POD_ARGS, "--no-install"],
                 env=env, timeout=100, check=False)
    assert result.returncode == 2, result.stderr
    healthy = [int(pid) for pid in waiting.read_text().split()]
    assert len(healthy) == 2
    assert not [pid for pid in healthy if psutil.pid_exists(pid)], "the healthy hosts were left running"
    assert "[worker 1] error: /data/train.csv: file not found" in result.stderr.splitlines()
    assert result.stderr.strip().splitlines()[-1] == (
        "error: training failed on worker 1 of 3 (exit code 2); stopped worker(s) 0, 2; "
        "its output is above, prefixed [worker 1]"
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [call[3] for call in calls] == ["ssh", "scp", "describe", "ssh", "ssh", "ssh"]
    assert sorted(call[-1] for call in calls[3:]) == ["--worker=0", "--worker=1", "--worker=2"]


def test_pod_script_reads_the_tpu_from_the_environment():
    from_arguments = pod_dry_run(*POD_ARGS, "--dry-run", "--no-install")
    from_environment = pod_dry_run("--dry-run", "--no-install", **POD_VARIABLES)
    assert from_environment.returncode == 0, from_environment.stderr
    assert from_environment.stdout == from_arguments.stdout
    # mkdir, copy, then (no install step) the describe that counts the hosts and the per-host train command
    mkdir, copy, count, train = [shlex.split(line) for line in from_environment.stdout.strip().splitlines()]
    assert count[4:6] == ["describe", "my-pod"] and count[-1] == "--format=json"
    assert train[-1] == "--worker=<each worker>"


@pytest.mark.parametrize("given", [[], ["--tpu-name", "my-pod"], ["--zone", "z", "--project", "p"]])
def test_pod_script_refuses_without_a_tpu_and_runs_nothing(given):
    result = pod_dry_run(*given, "--dry-run")
    assert result.returncode == 2
    assert result.stdout == ""
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and message.startswith("error: name the TPU"), message
    for flag, variable in (("--tpu-name", "TPU_NAME"), ("--zone", "ZONE"), ("--project", "PROJECT_ID")):
        assert (f"{flag}/${variable}" in message) == (flag not in given), message


def test_pod_copy_leaves_environments_and_results_behind(tmp_path):
    for name in ("configs", "pyproject.toml", ".venv", ".git", "outputs", "demo.egg-info", "benchmark-results"):
        (tmp_path / name).mkdir()
    assert load_pod_script().files_to_copy(tmp_path) == ["configs", "pyproject.toml"]


# ---- CI workflows run the commands the docs give ------------------------------------------


def readme_commands() -> set[tuple[str, ...]]:
    """Every shell command in the bash blocks of the README and docs/, as argv tuples (comments dropped)."""
    documents = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
    text = "\n".join(path.read_text(encoding="utf-8") for path in documents)
    found = set()
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            argv = tuple(shlex.split(line, comments=True))
            if argv:
                found.add(argv)
    return found


def workflow_commands(path) -> list[tuple[str, ...]]:
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    commands = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                argv = tuple(shlex.split(line, comments=True))
                if argv:
                    commands.append(argv)
    return commands


def workflow_files():
    return sorted((PROJECT / ".github" / "workflows").glob("*.yml"))


def test_workflows_are_exactly_the_expected_files():
    expected = ["ci.yml"]{% if cookiecutter.include_benchmarks %} + ["benchmarks.yml"]{% endif %}
    assert sorted(path.name for path in workflow_files()) == sorted(expected)


@pytest.mark.parametrize("path", workflow_files(), ids=lambda path: path.name)
def test_workflow_runs_only_commands_the_docs_give(path):
    readme = readme_commands()
    commands = workflow_commands(path)
    assert ("pip", "install", "-e", ".[xla-cpu,dev]", "-c", "constraints.txt") in commands  # the tested versions
    for argv in commands:
        assert argv in readme, f"{path.name} runs {shlex.join(argv)!r}, which neither README.md nor docs/ gives"


def test_ci_runs_the_fast_tier_on_every_push_and_the_whole_suite_on_pull_requests_and_weekly():
    path = PROJECT / ".github" / "workflows" / "ci.yml"
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request", "schedule"} <= set(triggers) and triggers["schedule"][0]["cron"]
    jobs = workflow["jobs"]
    assert jobs["fast"]["if"] == "github.event_name == 'push'"
    assert jobs["full"]["if"] == "github.event_name != 'push'"
    assert jobs["newest"]["if"] == "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    tests = {}
    for name, job in jobs.items():
        (argv,) = [tuple(shlex.split(step["run"])) for step in job["steps"] if "pytest" in step.get("run", "")]
        assert argv[0] == "PJRT_DEVICE=CPU" and "REQUIRE_XLA=1" in argv, argv
        tests[name] = argv[argv.index("pytest") + 1:]
        # The whole suite installs what its tests need and lets none of them skip (the trackers, xpk).
        assert ("REQUIRE_NO_SKIPS=1" in argv and "REQUIRE_XPK=1" in argv) == (name == "full"), argv
    assert tests == {"fast": ("-m", "not slow"), "full": (), "newest": ("-m", "not slow or pretrained")}
    installs = {name: [tuple(shlex.split(step["run"])) for step in job["steps"] if "install" in step.get("run", "")]
                for name, job in jobs.items()}
    tested, newest = ("pip", "install", "-e", ".[xla-cpu,dev]", "-c", "constraints.txt"), ("pip", "install", "-e", ".[xla-cpu,dev]")
    everything = ("pip", "install", "-e", ".[xla-cpu,dev,trackers,plan]", "-c", "constraints.txt")
    xpk = (".venv-xpk/bin/pip", "install", f"xpk=={XPK_VERSION}")
    assert installs == {"fast": [tested], "full": [everything, xpk], "newest": [newest]}

{%- if cookiecutter.include_benchmarks %}


def test_benchmark_workflow_uploads_the_json_it_writes():
    path = PROJECT / ".github" / "workflows" / "benchmarks.yml"
    (benchmark,) = [argv for argv in workflow_commands(path) if "benchmarks" in argv]
    assert "REQUIRE_XLA=1" in benchmark  # a suite that cannot reach XLA fails instead of skipping
    json_path = benchmark[benchmark.index("--benchmark-json") + 1]
    steps = yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"]["quick"]["steps"]
    (upload,) = [step for step in steps if step.get("uses", "").startswith("actions/upload-artifact")]
    assert json_path.startswith(upload["with"]["path"])
{%- endif %}
