"""A baked project can be updated from a newer template with cruft."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from cookiecutter.main import cookiecutter

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


def test_cruft_update_after_baking_through_an_abbreviation(tmp_path, monkeypatch):
    """`cookiecutter gh:org/tpu-template` records the URL it cloned, not `gh:...`, which git cannot clone.

    A user abbreviation (`loc:`) points at a local bare repository of the template, as `gh:` points at GitHub.
    """
    work = tmp_path / "template"
    shutil.copytree(TEMPLATE, work, ignore=IGNORED)
    git("init", "-q", "-b", "main", cwd=work)
    commit_all(work, "v1")
    bare = tmp_path / "remote" / "tpu-template.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    config = tmp_path / "cookiecutterrc"
    config.write_text(
        f"cookiecutters_dir: {tmp_path / 'clones'}\nreplay_dir: {tmp_path / 'replay'}\n"
        f"abbreviations:\n  loc: 'file://{tmp_path / 'remote'}/{{0}}.git'\n"
    )
    monkeypatch.setenv("COOKIECUTTER_CONFIG", str(config))
    project = Path(cookiecutter("loc:tpu-template", no_input=True, output_dir=str(tmp_path / "out"),
                                extra_context={"project_name": "Abbreviated"}))
    recorded = json.loads((project / ".cruft.json").read_text())
    assert recorded["template"] == f"file://{bare}"
    git("init", "-q", "-b", "main", cwd=project)
    commit_all(project, "baked")

    def cruft(*args):
        return subprocess.run([sys.executable, "-m", "cruft", *args], cwd=project, capture_output=True, text=True, input="")

    checked = cruft("check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ignore_file = work / "{{cookiecutter.project_slug}}" / ".gitignore"
    ignore_file.write_text(ignore_file.read_text() + "# A line added by a newer template.\n")
    commit_all(work, "v2")
    git("push", "-q", str(bare), "main", cwd=work)
    assert cruft("check").returncode != 0  # the template moved on
    updated = cruft("update", "--skip-apply-ask", "--allow-untracked-files")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "# A line added by a newer template." in (project / ".gitignore").read_text()
