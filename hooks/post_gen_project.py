"""Shape the baked project to the answers, then say what to do next.

A list of small named steps, standard library only, no network.
"""

import json
import shutil
import subprocess
from pathlib import Path

ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")
NOTEBOOK_FILES = ("train_on_tpu.ipynb", "tests/test_notebook.py", f"{ANSWERS['project_slug']}/launch/launch_guard.py")
SCRIPT_FILES = ("train.py", "tests/test_script.py")
# Each task's own code and tests; the project keeps only the chosen task's. Benchmarks not named here are every
# task's: the suite's plumbing, FSDPv2 over devices, the fine-tuning comparison of the precision levels.
TASK_FILES = {
    "text-classification": (
        f"{ANSWERS['project_slug']}/tasks/text_classification.py", f"{ANSWERS['project_slug']}/loop/predict_labels.py",
        f"{ANSWERS['project_slug']}/tasks/roc_auc.py",
        "tests/test_data_files.py", "tests/test_training.py", "tests/test_benchmark_logic.py",
        # The benchmarks written around a classifier: precision modes, eval batching and loops, checkpoint cost.
        "benchmarks/measure_precision.py", "benchmarks/test_precision.py", "benchmarks/measure_rehearsal.py",
        "benchmarks/measure_recompilation.py",
        "benchmarks/test_recompilation.py", "benchmarks/grid.py", "benchmarks/workload.py",
        "benchmarks/test_checkpointing.py", "benchmarks/measure_shared_model.py", "benchmarks/test_shared_model_memory.py",
        f"{ANSWERS['project_slug']}/watch/memory.py", "data/demo",
        # Trains as well as the Trainer: a real pretrained classifier over seeds (--bench-profile quality).
        "benchmarks/measure_quality.py", "benchmarks/test_quality.py",
    ),
    "causal-lm": (
        f"{ANSWERS['project_slug']}/tasks/causal_lm.py", f"{ANSWERS['project_slug']}/tasks/samples.py", f"{ANSWERS['project_slug']}/loop/generation.py",
        "tests/test_causal_lm.py", "benchmarks/test_packing.py", f"{ANSWERS['project_slug']}/data/packing.py",
        f"{ANSWERS['project_slug']}/tasks/instructions.py", "tests/test_instructions.py", "tests/chatml_template.jinja",
        f"{ANSWERS['project_slug']}/data/streaming.py", "tests/test_streaming.py", "data/demo-lm",
        # Streaming in the layouts, instruction formats, predict.py's generating loop (docs/specialising.md).
        f"{ANSWERS['project_slug']}/parallel/streams.py", f"{ANSWERS['project_slug']}/data/instruction_formats.py",
        f"{ANSWERS['project_slug']}/loop/predict_continuations.py",
        "docs/instruction-data.md",
        # The loop against TRL's SFTTrainer (trl: a benchmark dependency of the causal-LM bake only).
        "benchmarks/measure_lm_loops.py", "benchmarks/test_lm_loops.py",
        # Where predict.py generates fastest: the device's static cache against the host's generate().
        "benchmarks/test_generation.py",
    ),
}
BENCHMARK_FILES = (
    "benchmarks",
    "docs/benchmarks.md",
    "docs/benchmark-tables.md",
    "docs/reference-results.json",
    "docs/benchmarks-eval-batching.png",
    "docs/benchmarks-padding.png",
    "docs/benchmarks-precision.png",
    "tests/test_benchmark_page.py",
    ".github/workflows/benchmarks.yml",
    "tests/test_benchmark_logic.py",
    f"{ANSWERS['project_slug']}/watch/memory.py",
)


def remove(paths, root: Path) -> None:
    for name in paths:
        path = root / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def remove_unchosen_variants(answers, root: Path) -> None:
    if answers["variants"] == "script":
        remove(NOTEBOOK_FILES, root)
    elif answers["variants"] == "notebook":
        remove(SCRIPT_FILES, root)


def remove_other_tasks(answers, root: Path) -> None:
    for task, paths in TASK_FILES.items():
        if task != answers["task"]:
            remove(paths, root)


def place_the_reference_run(answers, root: Path) -> None:
    """docs/reference/<task>/ holds the template's reference benchmark run of each task (reference-results.json) and
    the page it draws (benchmarks.md, its pictures, its full tables): the project keeps its task's, in docs/."""
    folder = root / "docs" / "reference"
    if not folder.is_dir():
        return
    for path in (folder / answers["task"]).iterdir():
        shutil.move(str(path), str(root / "docs" / path.name))
    shutil.rmtree(folder)


def remove_benchmarks_if_unwanted(answers, root: Path) -> None:
    if not answers["include_benchmarks"]:
        remove(BENCHMARK_FILES, root)


def git_output(repo_dir: str, *args: str) -> str | None:
    """One line of git's answer about the template folder, or None where git has none."""
    try:
        result = subprocess.run(
            ["git", *args], cwd=repo_dir, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def template_commit(repo_dir: str) -> str | None:
    """The template's git commit, read locally (cookiecutter clones gh: templates with git)."""
    return git_output(repo_dir, "rev-parse", "HEAD")


def cloned_from(repo_dir: str) -> str | None:
    """The URL cookiecutter cloned the template from: its clone's origin, whichever config defined the abbreviation.

    None for a folder that is not a clone of its own (a zip's unpacked copy), so that git does not answer for a
    repository around it.
    """
    if not (Path(repo_dir) / ".git").exists():
        return None
    return git_output(repo_dir, "remote", "get-url", "origin")


def expanded(template: str) -> str:
    """`gh:org/repo` (or a user's own abbreviation) as a URL, where there is no clone to ask (a zip).

    Cookiecutter's own expansion and the user's config (~/.cookiecutterrc or $COOKIECUTTER_CONFIG); a
    `--config-file` is not visible to this hook. Cookiecutter is importable here because this hook runs in
    cookiecutter's own Python.
    """
    from cookiecutter.config import get_user_config
    from cookiecutter.repository import expand_abbreviations

    return expand_abbreviations(template, get_user_config().get("abbreviations", {}))


def record_answers_for_cruft(answers, root: Path) -> None:
    """Write .cruft.json so that `cruft update` can later bring in a newer template."""
    template = answers.get("_template", "")
    # cruft re-runs this hook without _repo_dir while updating; it then writes .cruft.json itself.
    repo_dir = answers.get("_repo_dir") or template
    is_remote = ":" in template and not Path(template).exists()
    record = {
        # cruft hands the recorded template to git as is: a URL git can clone, never `gh:...`.
        "template": (cloned_from(repo_dir) or expanded(template)) if is_remote else repo_dir,
        "commit": template_commit(repo_dir),
        "checkout": answers.get("_checkout"),
        "context": {"cookiecutter": answers},
        "directory": None,
    }
    (root / ".cruft.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def next_steps(answers) -> str:
    slug = answers["project_slug"]
    lines = [
        f"Baked {slug}/. Next:",
        f"  cd {slug}",
        "  python -m venv .venv && . .venv/bin/activate",
        "  pip install -e '.[xla-cpu,dev]'        # on a TPU host: pip install -e '.[tpu]'",
    ]
    if answers["variants"] != "notebook":
        lines.append("  PJRT_DEVICE=CPU HF_HUB_OFFLINE=1 python train.py   # the offline demo on an XLA CPU device")
    if answers["variants"] != "script":
        lines.append("  open train_on_tpu.ipynb in Colab or Kaggle (TPU runtime) and run all cells")
    lines.append("  PJRT_DEVICE=CPU pytest                  # the project's own tests")
    lines.append("  README.md: the first commands; docs/launchers.md: every target (Colab, Kaggle, TPU VM, pod, GKE).")
    return "\n".join(lines)


def main() -> None:
    root = Path.cwd()
    remove_unchosen_variants(ANSWERS, root)
    remove_other_tasks(ANSWERS, root)
    place_the_reference_run(ANSWERS, root)
    remove_benchmarks_if_unwanted(ANSWERS, root)
    record_answers_for_cruft(ANSWERS, root)
    print(next_steps(ANSWERS))


if __name__ == "__main__":
    main()
