"""Each bake holds its own task's code only: no module imports one its bake lacks, for every answer set tested.

Static and cheap: every bake is read with `ast`, nothing is imported or trained. The answer sets are all those the
template's tests bake (test_bake.py, test_generated_project.py, test_newest_versions.py, test_notebook_source.py):
the task, the variants and the benchmark answer each remove files (hooks/post_gen_project.py), so an import that
resolves in one bake may point at nothing in another. How the template specialises: docs/specialising.md.
"""

import ast
from pathlib import Path

import pytest

from tests.test_bake import COMBINATIONS
from tests.test_generated_project import FAST_TIER, WHOLE
from tests.test_newest_versions import NEWEST
from tests.test_notebook_source import ANSWERS as NOTEBOOK_ANSWERS

# Top-level folders of a bake whose modules import each other by absolute name (besides the package).
PROJECT_PACKAGES = ("benchmarks", "tests", "scripts")
# The causal LM's streaming, generation and instruction formats, by the names their code has: a classifier's package
# names none of them (in its code: a name, attribute, argument or run-time look-up, not prose or data).
CAUSAL_LM_ONLY = {
    "streaming", "StreamLoader", "stream", "streams", "stream_reader",  # streaming
    "continue_batch", "pin_rows", "row_pinning", "generate_on",  # generation
    "MESSAGES", "PROMPT_COMPLETION", "FORMATS_ALLOWED", "messages_problem", "example_format", "format_columns",
    "main_column", "file_format",  # instruction formats
}


def answer_sets() -> dict[str, dict]:
    """Every answer set a template test bakes, once each (by its answers), under the first name it has."""
    found = {}
    named = [*COMBINATIONS.items(), *WHOLE.items(), *FAST_TIER.items(), *NEWEST.items(),
             *((f"notebook-source-{index}", answers) for index, answers in enumerate(NOTEBOOK_ANSWERS))]
    for name, answers in named:
        found.setdefault(tuple(sorted(answers.items())), (name, answers))
    return dict(found.values())


ANSWER_SETS = answer_sets()


def module_file(root: Path, parts: list[str]) -> Path | None:
    """The file of the module `parts` under `root` (a module or a package's __init__.py), or None."""
    if not parts:
        return None
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def imported_module(project: Path, path: Path, node: ast.ImportFrom) -> list[str] | None:
    """The module a `from ... import` names, as its parts from the project root (None: above the project)."""
    here = list(path.relative_to(project).parent.parts)
    if node.level > len(here) + 1:
        return None
    base = here[: len(here) - node.level + 1] if node.level else []
    return base + (node.module.split(".") if node.module else [])


def binds(project: Path, path: Path, name: str) -> bool:
    """Whether module `path` defines or imports `name` at its top level (what `from module import name` takes),
    following its `from .x import *`."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if name in {leaf.id for target in targets for leaf in ast.walk(target) if isinstance(leaf, ast.Name)}:
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and [alias.name for alias in node.names] == ["*"]:
            source = module_file(project, imported_module(project, path, node) or [])
            if source is not None and source != path and binds(project, source, name):
                return True
    return False


def unresolved(project: Path, path: Path, package: str) -> list[str]:
    """`line: import` for each import in `path` (anywhere in it: in functions, under `if`, guarded or not) of the
    project's own modules that names no file of this bake, nor a name its module binds."""
    ours = (package, *PROJECT_PACKAGES)
    problems = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            wanted = [(alias.name.split("."), None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = imported_module(project, path, node)
            wanted = [(module, alias.name) for alias in node.names] if module else []
        else:
            continue
        for module, name in wanted:
            if not module or module[0] not in ours:
                continue
            found = module_file(project, module)
            if found is None:
                problems.append(f"{node.lineno}: {'.'.join(module)} (no such module in this bake)")
            elif name not in (None, "*") and module_file(project, [*module, name]) is None and not binds(project, found, name):
                problems.append(f"{node.lineno}: {name} from {'.'.join(module)} (neither a module nor a name it binds)")
    return sorted(problems, key=lambda problem: int(problem.split(":")[0]))


def python_files(project: Path) -> list[Path]:
    return sorted(path for path in project.rglob("*.py") if "__pycache__" not in path.parts)


@pytest.mark.parametrize("name", list(ANSWER_SETS))
def test_every_import_names_a_module_of_its_bake(bake_once, name):
    project = bake_once(**ANSWER_SETS[name])
    package = project.name
    found = [f"{path.relative_to(project)}:{problem}" for path in python_files(project)
             for problem in unresolved(project, path, package)]
    assert len(python_files(project)) > 20  # the bake was read
    assert not found, "imports of modules this bake lacks:\n" + "\n".join(found)


LOOKUPS = ("getattr", "hasattr", "setattr")  # a name in a string, looked up at run time


def names_in(source: str) -> list[tuple[int, str]]:
    """(line, name) for every name the code uses: variables, attributes, definitions, arguments, imports, and the
    names getattr, hasattr and setattr are given."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.arg, ast.keyword)):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [*node.name.split("."), node.asname]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in LOOKUPS:
            names = [node.args[1].value] if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else []
        else:
            continue
        found += [(getattr(node, "lineno", 0), name) for name in names if name]
    return found


def test_a_classifier_bake_names_nothing_of_the_causal_lm(bake_once):
    project = bake_once()  # the defaults: a classifier
    package = project / project.name
    found = [f"{path.relative_to(project)}:{line}: {name}" for path in python_files(package)
             for line, name in names_in(path.read_text(encoding="utf-8")) if name in CAUSAL_LM_ONLY]
    assert not found, "causal-LM code in a classifier's package:\n" + "\n".join(sorted(set(found)))


def test_the_import_check_can_fail(tmp_path):
    package = tmp_path / "pkg"
    for name, source in {
        "pkg/__init__.py": "from .defaults import *\n",
        "pkg/defaults.py": "VERSION = 1\n",
        "pkg/data/__init__.py": "",
        "pkg/data/sources.py": "def load():\n    pass\n",
        "pkg/loop/__init__.py": "",
        "pkg/loop/preparation.py": (
            "from ..data import sources, streaming\nfrom ..data.sources import load, missing\nfrom .. import VERSION\n"
            "def prepare(config):\n    if getattr(config, 'streaming', False):\n"
            "        from ..data.streaming import StreamLoader\n"
        ),
        "tests/test_x.py": "import pkg.data.sources\nimport pkg.data.packing\nfrom tests.helpers import tool\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    assert unresolved(tmp_path, package / "loop" / "preparation.py", "pkg") == [
        "1: streaming from pkg.data (neither a module nor a name it binds)",
        "2: missing from pkg.data.sources (neither a module nor a name it binds)",
        "6: pkg.data.streaming (no such module in this bake)",
    ]
    assert [name for _, name in names_in((package / "loop" / "preparation.py").read_text())
            if name in CAUSAL_LM_ONLY] == ["streaming", "streaming", "StreamLoader"]
    assert unresolved(tmp_path, tmp_path / "tests" / "test_x.py", "pkg") == [
        "2: pkg.data.packing (no such module in this bake)", "3: tests.helpers (no such module in this bake)",
    ]
