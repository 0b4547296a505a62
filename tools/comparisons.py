"""The table of every test that compares the numbers of two runs, and the form of its comparison, for docs/tests.md.

A test that compares two runs' numbers carries `@pytest.mark.compares(form, what)`: form "bit for bit" (the same
program on the same inputs), "float32" or "bf16" (two programs, within the bound the bake's tests/comparing.py
derives). This reads the markers from the template's sources (the bake's tests/ and benchmarks/, and the template's
own), without baking or importing anything, and writes the table between its markers in docs/tests.md:

    python tools/comparisons.py           # print the table
    python tools/comparisons.py --write   # put it in docs/tests.md (tests/test_docs.py holds the page to it)
"""

import ast
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BAKE = ROOT / "{{cookiecutter.project_slug}}"
SOURCES = (BAKE / "tests", BAKE / "benchmarks", ROOT / "tests", ROOT / "benchmarks")
PAGE = ROOT / "docs" / "tests.md"
MARKERS = ("<!-- comparisons:start -->", "<!-- comparisons:end -->")


def _comparing():
    """The bake's tests/comparing.py (plain Python: the forms and bounds it derives)."""
    spec = importlib.util.spec_from_file_location("comparing", BAKE / "tests" / "comparing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMS = _comparing().FORMS
JINJA_STATEMENT = re.compile(r"\{%-?.*?-?%\}")


def python_of(text: str) -> str:
    """A template file's text as Python: its Jinja statements gone (what each branch holds stays), the package's name
    a name."""
    return JINJA_STATEMENT.sub("", text).replace("{{ cookiecutter.project_slug }}", "project")


def compares(decorator) -> tuple[str, str] | None:
    """(form, what) of a `pytest.mark.compares(form, what)` decorator, else None."""
    if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.compares":
        form, what = (ast.literal_eval(argument) for argument in decorator.args)
        if form not in FORMS:
            raise ValueError(f"compares({form!r}, ...): the form is one of {FORMS}")
        return form, what
    return None


def found() -> list[tuple[str, str, str, str]]:
    """(file, test, form, what) of every marked test, in file and line order."""
    rows = []
    for folder in SOURCES:
        for path in sorted(folder.glob("test_*.py")):
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(python_of(text) if BAKE in path.parents else text, filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    for decorator in node.decorator_list:
                        if marked := compares(decorator):
                            rows.append((node.lineno, path.relative_to(ROOT).as_posix(), node.name, *marked))
    return [row[1:] for row in sorted(rows, key=lambda row: (row[1], row[0]))]


def table() -> str:
    rows = found()
    counts = {form: sum(row[2] == form for row in rows) for form in FORMS}
    lines = [f"{len(rows)} tests compare the numbers of two runs: {counts['bit for bit']} bit for bit, "
             f"{counts['float32']} within float32's bound, {counts['bf16']} within bf16's resolution "
             "(`tools/comparisons.py` reads their `compares` markers).", "",
             "| test | form | what it compares |", "|---|---|---|"]
    for file, test, form, what in rows:
        lines.append(f"| `{file.replace('{{cookiecutter.project_slug}}/', '')}::{test}` | {form} | {what} |")
    return "\n".join(lines)


def placed(text: str, new: str) -> str:
    start, end = MARKERS
    before, _, rest = text.partition(start)
    _, _, after = rest.partition(end)
    return f"{before}{start}\n{new}\n{end}{after}"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        PAGE.write_text(placed(PAGE.read_text(encoding="utf-8"), table()), encoding="utf-8")
        print(f"written: {PAGE}")
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
