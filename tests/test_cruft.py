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


def template_behind_an_abbreviation(tmp_path) -> tuple[Path, Path, Path]:
    """The template in a git working copy, pushed to a local bare "remote" that a `loc:` abbreviation points at.

    Returns the working copy, the bare repository and a cookiecutter config defining `loc:`, as `gh:` points at
    GitHub.
    """
    work = tmp_path / "template"
    shutil.copytree(TEMPLATE, work, ignore=IGNORED)
    git("init", "-q", "-b", "main", cwd=work)
    commit_all(work, "v1")
    bare = tmp_path / "remote" / "tpu-template.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    config = tmp_path / "cookiecutterrc"
    config.write_text(
        cookiecutter_config(tmp_path) + f"abbreviations:\n  loc: 'file://{tmp_path / 'remote'}/{{0}}.git'\n"
    )
    return work, bare, config


def cookiecutter_config(tmp_path) -> str:
    """A config that keeps cookiecutter's clones and replays in tmp_path, and defines no abbreviation."""
    return f"cookiecutters_dir: {tmp_path / 'clones'}\nreplay_dir: {tmp_path / 'replay'}\n"


def bake_through_loc(tmp_path, **options) -> Path:
    return Path(cookiecutter("loc:tpu-template", no_input=True, output_dir=str(tmp_path / "out"),
                             extra_context={"project_name": "Abbreviated"}, **options))


def assert_cruft_follows_the_remote(project: Path, work: Path, bare: Path) -> None:
    """.cruft.json names the URL git cloned, `cruft check` passes, and `cruft update` brings in a pushed change."""
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


def test_cruft_update_after_baking_through_an_abbreviation(tmp_path, monkeypatch):
    """`cookiecutter gh:org/tpu-template` records the URL it cloned, not `gh:...`, which git cannot clone.

    Here the user's own config ($COOKIECUTTER_CONFIG) defines the abbreviation.
    """
    work, bare, config = template_behind_an_abbreviation(tmp_path)
    monkeypatch.setenv("COOKIECUTTER_CONFIG", str(config))
    assert_cruft_follows_the_remote(bake_through_loc(tmp_path), work, bare)


def test_cruft_update_after_baking_through_an_abbreviation_from_a_config_file(tmp_path, monkeypatch):
    """`cookiecutter --config-file X loc:...`: only X defines `loc:`, which the hook cannot read; the clone knows."""
    work, bare, config = template_behind_an_abbreviation(tmp_path)
    user_config = tmp_path / "user-cookiecutterrc"
    user_config.write_text(cookiecutter_config(tmp_path))
    monkeypatch.setenv("COOKIECUTTER_CONFIG", str(user_config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # nor a ~/.cookiecutterrc
    assert_cruft_follows_the_remote(bake_through_loc(tmp_path, config_file=str(config)), work, bare)
