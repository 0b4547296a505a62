"""The package's folders: docs/package-map.md's map is the code's, no circle, short modules, one door to torch_xla.

Fast: nothing here imports torch or the package; the files are read with `ast`.
"""

import ast
from pathlib import Path

from conftest import load_script

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = PROJECT / "{{ cookiecutter.project_slug }}"
MAX_LINES = 230
# The one subpackage that may import torch_xla: everything else asks it.
DOOR = "xla"
# Calls that look a module up by its name (`from importlib import import_module` leaves the bare name).
LOOKUPS = {"sys.modules.get", "importlib.import_module", "import_module", "importlib.util.find_spec", "util.find_spec",
           "find_spec", "__import__"}


package_map = load_script("package_map")


def modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def dotted(node) -> str:
    """`sys.modules.get` for the expression sys.modules.get ("" for anything but names and attributes)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}" if dotted(node.value) else ""
    return ""


def is_torch_xla(name) -> bool:
    return isinstance(name, str) and (name == "torch_xla" or name.startswith("torch_xla."))


def constant(node):
    return node.value if isinstance(node, ast.Constant) else None


def torch_xla_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) for every place this source reaches torch_xla: an import anywhere in it (in a function, under an
    `if`), or a look-up by name (sys.modules, importlib, `"torch_xla" in sys.modules`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if not node.level else []
        elif isinstance(node, ast.Call) and dotted(node.func) in LOOKUPS:
            names = [constant(node.args[0])] if node.args else []
        elif isinstance(node, ast.Subscript) and dotted(node.value) == "sys.modules":
            names = [constant(node.slice)]
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            names = [constant(node.left)] if any(dotted(right) == "sys.modules" for right in node.comparators) else []
        else:
            continue
        found += [(node.lineno, name) for name in names if is_torch_xla(name)]
    return sorted(found)


def test_the_documented_package_map_is_the_codes():
    problem = package_map.check(PROJECT / "docs" / "package-map.md", PACKAGE)
    assert problem is None, f"{problem} (python scripts/package_map.py --write docs/package-map.md)"


def test_no_circle_between_folders():
    graph = package_map.folder_graph(PACKAGE)
    circle = package_map.find_circle(graph)
    assert circle is None, "a circle between folders: " + " -> ".join(circle)


def test_only_the_command_lines_import_the_loop():
    # The loop uses the machinery, never the reverse; the command lines (train.py's, predict.py's, plan.py's) are the top.
    graph = package_map.folder_graph(PACKAGE)
    lines = ("cli", "predict_cli", "plan_cli", "plan_compile", "plan_rehearsal", "rehearse_cli")  # plan.py's are four
    wrong = sorted(f"{node} -> {target}" for node, targets in graph.items() for target in targets
                   if target in ("loop", *lines) and node not in lines)
    assert not wrong, f"only the command lines may import the loop or a command line: {', '.join(wrong)}"


def test_every_subpackage_says_its_job():
    missing = [str(init.relative_to(PROJECT)) for init in sorted(PACKAGE.glob("*/__init__.py"))
               if not ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))]
    assert not missing, f"no docstring (its first line says the folder's one job): {', '.join(missing)}"


def test_modules_are_short():
    long = [f"{path.relative_to(PROJECT)} ({lines})" for path in modules()
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines: {', '.join(long)}"


MAX_PARAMETERS = 5  # the loop's functions take a RunContext (loop/context.py), not the same arguments again


def parameters(function) -> list[str]:
    """A function's parameters by name, `self` and `cls` left out."""
    arguments = function.args
    named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    return [argument.arg for argument in named if argument is not None and argument.arg not in ("self", "cls")]


def long_signatures(source: str) -> list[str]:
    return [f"{node.name}({', '.join(parameters(node))})" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and len(parameters(node)) > MAX_PARAMETERS]


def test_no_function_of_the_loop_takes_more_than_five_parameters():
    too_long = {path.name: found for path in sorted((PACKAGE / "loop").glob("*.py"))
                if (found := long_signatures(path.read_text(encoding="utf-8")))}
    assert too_long == {}
    assert long_signatures("def f(self, a, b, c, d, e, *, g=1): pass") == ["f(a, b, c, d, e, g)"]  # the check can fail


def test_only_the_xla_subpackage_reaches_torch_xla():
    door = PACKAGE / DOOR
    found = [f"{path.relative_to(PROJECT)}:{line}: {name}" for path in modules() if door not in path.parents
             for line, name in torch_xla_uses(path.read_text(encoding="utf-8"))]
    assert not found, f"torch_xla reached outside {DOOR}/ (ask {DOOR}/ instead):\n" + "\n".join(found)


SYNTHETIC = '''
import importlib.util
import os
import sys

import torchvision


def start():
    import torch_xla.runtime as xr

    return xr.world_size()


if os.environ.get("PJRT_DEVICE"):
    from torch_xla.distributed import spmd
installed = importlib.util.find_spec("torch_xla") is not None
loaded = sys.modules.get("torch_xla.core.xla_model")
imported = "torch_xla" in sys.modules
other = sys.modules.get("torch_xla_extra"), "torch_xla" in ("a", "b")
'''


def test_the_door_check_can_fail():
    assert torch_xla_uses(SYNTHETIC) == [
        (10, "torch_xla.runtime"), (16, "torch_xla.distributed"), (17, "torch_xla"), (18, "torch_xla.core.xla_model"),
        (19, "torch_xla"),
    ]


def test_the_map_sees_circles_and_imports_inside_functions(tmp_path):
    package = tmp_path / "pkg"
    for name, source in {
        "__init__.py": '"""The package."""\n',
        "cli.py": '"""The command line."""\n\ndef main():\n    from .loop import run\n',
        "loop/__init__.py": '"""The loop."""\n\nif True:\n    from pkg.base import thing\n',
        "base/__init__.py": '"""The base."""\n',
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(source)
    graph = package_map.folder_graph(package)
    assert graph == {"cli": {"loop"}, "loop": {"base"}, "base": set()}
    assert package_map.import_order(graph) == ["base", "loop", "cli"]
    (package / "base" / "inner.py").write_text("def late():\n    from .. import cli\n")
    assert package_map.find_circle(package_map.folder_graph(package)) == ["base", "cli", "loop", "base"]


def door_functions() -> set[str]:
    """`module.function` for every public function of the XLA door."""
    found = set()
    for path in sorted((PACKAGE / DOOR).glob("*.py")):
        tree = ast.parse(path.read_text())
        found |= {f"{path.stem}.{node.name}" for node in tree.body
                  if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
    return found


def test_the_migration_map_has_a_row_for_each_door_function():
    """docs/torch-tpu.md names each function of xla/ in the first column of its tables, and nothing else there."""
    rows = [line.split("|")[1].strip() for line in (PROJECT / "docs" / "torch-tpu.md").read_text().splitlines()
            if line.startswith("| `")]
    mapped = {row.strip("`") for row in rows}
    functions = door_functions()
    assert len(functions) > 20  # the door was read
    assert functions - mapped == set(), "door functions without a row in docs/torch-tpu.md"
    assert mapped - functions == set(), "rows in docs/torch-tpu.md naming no function of the door"
