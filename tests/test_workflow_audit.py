"""The baked project's GitHub workflows pass zizmor's security audit, offline (no GitHub API)."""

import re
import subprocess
import sysconfig
from pathlib import Path

from tests.test_pins import pinned

# zizmor ships a binary, not an importable module: it lies next to this environment's python.
ZIZMOR = Path(sysconfig.get_path("scripts")) / "zizmor"


def audit(*workflows: Path) -> subprocess.CompletedProcess:
    """zizmor on the given files, named one by one so that none is skipped by a .gitignore or a config."""
    return subprocess.run(
        [str(ZIZMOR), "--offline", "--no-config", "--no-progress", "--color", "never", *map(str, workflows)],
        capture_output=True, text=True, timeout=120,
    )


def workflows(project: Path) -> list[Path]:
    return sorted((project / ".github" / "workflows").glob("*.yml"))


def test_the_audit_runs_the_pinned_zizmor():
    """Each zizmor release adds audits: the verdict below is the pinned release's."""
    version = subprocess.run([str(ZIZMOR), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.split() == ["zizmor", pinned("zizmor")]


def test_baked_workflows_have_no_findings(default_project):
    files = workflows(default_project)
    assert [path.name for path in files] == ["benchmarks.yml", "ci.yml"]
    result = audit(*files)
    assert result.returncode == 0 and "No findings" in result.stdout, result.stdout + result.stderr


def test_the_audit_reports_an_unpinned_action(default_project, tmp_path):
    """The check above can fail: the same audit flags ci.yml once its checkout is pinned to a tag again."""
    ci = (default_project / ".github" / "workflows" / "ci.yml").read_text()
    unpinned, count = re.subn(r"actions/checkout@[0-9a-f]{40}", "actions/checkout@v4", ci)
    assert count == 3, "ci.yml's three jobs (fast, full, newest) no longer pin actions/checkout by commit"
    workflow = tmp_path / ".github" / "workflows" / "ci.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text(unpinned)
    result = audit(workflow)
    assert result.returncode != 0 and "error[unpinned-uses]" in result.stdout, result.stdout + result.stderr
