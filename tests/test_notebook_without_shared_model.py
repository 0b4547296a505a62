"""shared_model=no: the baked notebook still runs end to end (the default bake runs it with the shared model)."""

import os
import subprocess
import sys


def test_notebook_runs_with_the_model_built_in_each_process(bake):
    project = bake(shared_model=False)
    env = {**os.environ, "PJRT_DEVICE": "CPU", "REQUIRE_XLA": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_notebook.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=1800,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary, summary
