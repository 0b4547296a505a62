"""Run the project's own command line in a fresh process and read its report (what a user runs, measured).

A fresh process per run: SPMD and the XLA variables are chosen before the runtime starts. The process is forked from
the benchmarks' parent (isolation.run), which imported the libraries but never started a runtime, so a run skips
their imports (about 9 CPU-seconds a run on 2 cores) and otherwise runs as `python -m` would: its own arguments,
its device variables set before its runtime starts, its output in a log of its own.
"""

import json
import os
import runpy
import sys
from pathlib import Path

from . import isolation

PROJECT = Path(__file__).resolve().parent.parent


def command_line(target: str, argv: list[str], env: dict, log: str) -> int:
    """In the forked child: `python -m {{ cookiecutter.project_slug }}.<target> *argv` (or `python <target>` for a
    script of the project, such as plan.py) with `env` added to the environment and its stdout and stderr written to
    `log`; returns its exit status."""
    os.environ.update(env)
    with open(log, "wb") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.argv = [target, *argv]
    try:
        if target.endswith(".py"):
            runpy.run_path(str(PROJECT / target), run_name="__main__")
        else:
            runpy.run_module(f"{{ cookiecutter.project_slug }}.{target}", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as ended:
        status = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def run_command(target: str, argv: list[str], log: Path, devices: int = 1) -> None:
    """command_line in a child forked for it, on `devices` XLA CPU devices; raises with the log's end if it fails."""
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices), "HF_HUB_OFFLINE": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    status = isolation.run(command_line, target, argv, env, str(log))
    if status:
        raise AssertionError(f"{target} {' '.join(argv)} on {devices} device(s) failed ({status}):\n"
                             f"{log.read_text()[-3000:]}")


def run_project(output: Path, *args: str, devices: int = 1, module: str = "cli") -> dict:
    """train.py's run (module "cli") into `output`, or predict.py's (module "predict_cli": `output` is its file)."""
    flags = ["--output_dir", str(output)] if module == "cli" else ["--output", str(output)]
    run_command(module, [*flags, *args], Path(f"{output}.log"), devices)
    return json.loads((output / "report.json" if module == "cli" else Path(f"{output}.report.json")).read_text())
