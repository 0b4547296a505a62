"""Run the project's own command line in a fresh process and read its report (what a user runs, measured).

A fresh process per run: SPMD and the XLA variables are chosen before the runtime starts.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def run_project(output: Path, *args: str, devices: int = 1, module: str = "cli") -> dict:
    """train.py's run (module "cli") into `output`, or predict.py's (module "predict_cli": `output` is its file)."""
    flags = ["--output_dir", str(output)] if module == "cli" else ["--output", str(output)]
    command = [sys.executable, "-m", f"{{ cookiecutter.project_slug }}.{module}", *flags, *args]
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode:
        raise AssertionError(f"{' '.join(args)} on {devices} device(s) failed:\n{result.stderr[-3000:]}")
    return json.loads((output / "report.json" if module == "cli" else Path(f"{output}.report.json")).read_text())
