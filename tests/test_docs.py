"""The template's README is short and starts with its commands, and every path it and docs/ name is there.

The check is the baked project's own (its scripts/doc_paths.py, which its tests/test_docs.py runs on each bake): here
the template's root and its project folder are the bases, and `<pkg>` is the package inside that folder.
"""

import importlib.util
import shlex

from tests.baking import TEMPLATE, load_tool

PROJECT = TEMPLATE / "{{cookiecutter.project_slug}}"
FIRST_SCREEN = 40
README_LINES = 250


def doc_paths():
    spec = importlib.util.spec_from_file_location("doc_paths", PROJECT / "scripts" / "doc_paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_screen_commands() -> list[list[str]]:
    lines = (TEMPLATE / "README.md").read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN]
    block = "\n".join(lines).partition("```bash\n")[2].partition("```")[0]
    return [argv for line in block.splitlines() if (argv := shlex.split(line, comments=True))]


def test_the_readme_is_short_and_starts_with_the_two_commands_ci_runs_one_of():
    assert len((TEMPLATE / "README.md").read_text(encoding="utf-8").splitlines()) <= README_LINES
    commands = first_screen_commands()
    assert ["make", "demo"] in commands and ["make", "test"] in commands
    ci = [shlex.split(line) for line in (TEMPLATE / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci == [["make", "test"]]  # .ci/run: exactly the README's test command
    targets = (TEMPLATE / "Makefile").read_text()
    assert all(f"\n{argv[1]}:" in targets for argv in commands if argv[0] == "make")


def test_every_path_the_readme_and_docs_name_is_there():
    module = doc_paths()
    package = PROJECT / "{{cookiecutter.project_slug}}"
    tree = module.Tree([TEMPLATE, PROJECT, package], package, names=("tpu_text_classifier", "tpu_causal_lm"))
    documents = [TEMPLATE / "README.md", *sorted((TEMPLATE / "docs").glob("*.md"))]
    assert [line for document in documents for line in tree.missing_in_markdown(document)] == []


def test_a_wrong_path_in_the_readme_would_be_found(tmp_path):
    module = doc_paths()
    package = PROJECT / "{{cookiecutter.project_slug}}"
    tree = module.Tree([TEMPLATE, PROJECT, package], package)
    doc = tmp_path / "README.md"
    doc.write_text("`<pkg>/loop/training.py`, `tools/update_readme_results.py`, `<pkg>/training.py`, "
                   "`tools/update_results.py`\n", encoding="utf-8")
    assert tree.missing_in_markdown(doc) == [f"{doc}: <pkg>/training.py", f"{doc}: tools/update_results.py"]


def test_the_comparisons_table_is_every_compares_marker_of_the_template():
    """docs/tests.md lists every test that compares two runs' numbers, with its form, as tools/comparisons.py reads
    the `compares` markers (python tools/comparisons.py --write draws it again)."""
    comparisons = load_tool("comparisons")
    page = (TEMPLATE / "docs" / "tests.md").read_text(encoding="utf-8")
    start, end = comparisons.MARKERS
    assert page.partition(start)[2].partition(end)[0].strip() == comparisons.table()
    rows = comparisons.found()
    assert {form for _, _, form, _ in rows} == {"bit for bit", "float32", "bf16"}
    # The one that failed on an AMD EPYC is there, with bf16's bound.
    assert ("{{cookiecutter.project_slug}}/tests/test_steps_per_execution.py",
            "test_the_demo_with_four_steps_a_call_ends_at_the_same_eval_loss") in {(file, test) for file, test, *_ in rows}



def test_a_compares_marker_with_an_unknown_form_is_refused():
    """A form that is neither bit for bit nor a bound the bake derives cannot reach the table."""
    import ast

    import pytest

    comparisons = load_tool("comparisons")
    call = ast.parse('pytest.mark.compares("close enough", "a against b")', mode="eval").body
    with pytest.raises(ValueError, match="close enough"):
        comparisons.compares(call)
    assert comparisons.compares(ast.parse('pytest.mark.compares("bf16", "a against b")', mode="eval").body) == (
        "bf16", "a against b")
