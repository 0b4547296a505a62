"""The default baked project's own test suite passes inside the baked copy."""

import os
import subprocess
import sys


def test_baked_project_test_suite_passes(default_project):
    env = {**os.environ, "PJRT_DEVICE": "CPU", "REQUIRE_XLA": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=default_project, env=env, capture_output=True, text=True, timeout=3600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "skipped" not in summary, summary
