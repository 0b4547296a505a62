"""The package's shape: no module imports itself back through others, not even from inside a function."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "{{ cookiecutter.project_slug }}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that this file imports anywhere in it (relative imports resolved)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from . import training` imports a module; `from .data import wants_demo` a name from one.
            for alias in node.names:
                named.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    # Importing a.b.c runs a/__init__ and a/b/__init__ first, except those this module's own import already ran.
    running = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 1)}
    parents = {".".join(found.split(".")[:end]) for found in named for end in range(1, found.count(".") + 1)}
    return (named | (parents - running)) & modules - {name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported(path, modules) for path in paths}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    done, path = set(), []

    def visit(module):
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # cli.py imports training inside main(); tasks/__init__.py imports the task's module as `from . import ...`.
    assert "{{ cookiecutter.project_slug }}.loop.training" in graph["{{ cookiecutter.project_slug }}.cli"]
    assert graph["{{ cookiecutter.project_slug }}.tasks"] == {"{{ cookiecutter.project_slug }}.tasks.{{ cookiecutter.task | replace('-', '_') }}"}


def test_no_import_circle():
    graph = import_graph()
    assert cycle(graph) is None, " -> ".join(cycle(graph))
