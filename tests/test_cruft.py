"""A baked project can be updated from a newer template with cruft."""

import json
import shutil
import subprocess
import sys

from tests.baking import TEMPLATE, bake_into

IGNORED = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".pytest_cache", "benchmark-results")


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def commit_all(cwd, message):
    git("add", "-A", cwd=cwd)
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", message, cwd=cwd)


def test_cruft_update_brings_in_template_changes(tmp_path):
    template = tmp_path / "template"
    shutil.copytree(TEMPLATE, template, ignore=IGNORED)
    git("init", "-q", "-b", "main", cwd=template)
    commit_all(template, "v1")
    project = bake_into(tmp_path / "out", template=template, project_name="Cruft Demo")
    recorded = json.loads((project / ".cruft.json").read_text())
    assert recorded["template"] == str(template)
    assert len(recorded["commit"]) == 40
    git("init", "-q", "-b", "main", cwd=project)
    commit_all(project, "baked")

    ignore_file = template / "{{cookiecutter.project_slug}}" / ".gitignore"
    ignore_file.write_text(ignore_file.read_text() + "# A line added by a newer template.\n")
    commit_all(template, "v2")
    result = subprocess.run(
        [sys.executable, "-m", "cruft", "update", "--skip-apply-ask", "--allow-untracked-files"],
        cwd=project, capture_output=True, text=True, input="",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# A line added by a newer template." in (project / ".gitignore").read_text()
    assert json.loads((project / ".cruft.json").read_text())["commit"] != recorded["commit"]
