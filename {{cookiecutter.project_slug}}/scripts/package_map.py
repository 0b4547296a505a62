"""The package's map: its folders in import order and the imports between them, as a Markdown block.

    python scripts/package_map.py [--package PATH] [--write docs/package-map.md | --check docs/package-map.md]

Prints the block: the folders lowest first (each after every folder it imports), each with the first line of its
docstring, and a Mermaid flowchart of the folder-level imports. --write puts it between the markers of
docs/package-map.md (<!-- package-map:start --> and <!-- package-map:end -->); --check exits 1 when that block is not
the one the code gives. A circle between folders is an error in every mode: it has no lowest folder, so no map.
Standard library only: it runs before anything is installed (a lint step, a pre-commit hook).
"""

import argparse
import ast
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = PROJECT / {{ cookiecutter.project_slug | tojson }}
START, END = "<!-- package-map:start -->", "<!-- package-map:end -->"
# The package's own __init__.py: a node only when something imports a name from it, or it imports something.
ROOT = "__init__"


class Circle(Exception):
    """Folders that import each other round a circle (its folders are the exception's args)."""


def imported_names(path: Path, package: Path) -> set[str]:
    """The package's parts this file imports anywhere in it (inside functions and `if` blocks too: an import there
    still ties the folders together), as their first name inside the package."""
    parts = path.relative_to(package).with_suffix("").parts
    folder = [package.name, *parts[:-1]]  # where a relative import starts (an __init__.py's folder is its own)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(folder):
                continue  # above the package: not ours
            base = folder[: len(folder) - node.level + 1] if node.level else []
            base = base + (node.module.split(".") if node.module else [])
            # `from . import training` imports a module: the name after the base may be the part imported.
            names = [base + [alias.name] for alias in node.names]
        else:
            continue
        found.update(name[1] for name in names if name[0] == package.name and len(name) > 1)
    return found


def folder_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each node (a subpackage, or a top-level module by its name) -> the nodes it imports, itself left out."""
    paths = sorted(path for path in package.rglob("*.py") if "__pycache__" not in path.parts)
    node_of = {path: path.relative_to(package).with_suffix("").parts[0] for path in paths}
    nodes = set(node_of.values())
    graph = {node: set() for node in nodes}
    for path, node in node_of.items():
        # A name that is no module nor folder (`from pkg import TrainConfig`) comes from the package's __init__.py.
        graph[node] |= {name if name in nodes else ROOT for name in imported_names(path, package)} - {node}
    if ROOT in graph and not graph[ROOT] and not any(ROOT in targets for targets in graph.values()):
        del graph[ROOT]
    return graph


def import_order(graph: dict[str, set[str]]) -> list[str]:
    """The nodes lowest first, each after every node it imports; among the nodes ready, the first by name.
    Raises Circle when none is ready."""
    order, left = [], set(graph)
    while left:
        ready = sorted(node for node in left if not graph[node] & left)
        if not ready:
            # Every node left imports another one left (none is ready): following the first such import from any of
            # them comes back to a node already passed, and that stretch is a circle.
            path = [min(left)]
            while (step := min(graph[path[-1]] & left)) not in path:
                path.append(step)
            raise Circle(*path[path.index(step):], step)
        order.append(ready[0])
        left.remove(ready[0])
    return order


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle between nodes, as the nodes along it (the first one again at its end), or None."""
    try:
        import_order(graph)
    except Circle as circle:
        return list(circle.args)
    return None


def summary(package: Path, node: str) -> str:
    """The first line of a folder's __init__.py docstring, or of a top-level module's."""
    path = package / node / "__init__.py" if (package / node).is_dir() else package / f"{node}.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) if path.is_file() else None
    return doc.strip().splitlines()[0] if doc else "(no docstring)"


def block(package: Path = PACKAGE) -> str:
    """The Markdown between the markers of docs/package-map.md: the folder tree and the flowchart. Raises Circle."""
    graph = folder_graph(package)
    order = import_order(graph)
    labels = {node: f"{node}/" if (package / node).is_dir() else f"{node}.py" for node in order}
    width = max(map(len, labels.values()), default=0)
    tree = [f"{labels[node].ljust(width)}  — {summary(package, node)}" for node in order]
    chart = [f'    {node}["{labels[node]}"]' for node in order]
    chart += [f"    {node} --> {target}" for node in sorted(graph) for target in sorted(graph[node])]
    return "\n".join([
        "", "<!-- Written by scripts/package_map.py --write docs/package-map.md: edit the code, not this block. -->",
        "", "Lowest first: a folder imports only folders above it in this list.", "",
        "```text", *tree, "```", "", "```mermaid", "flowchart TD", *chart, "```", "",
    ])


def readme_block(text: str) -> str | None:
    """What the document holds between the markers, or None without them."""
    start, end = text.find(START), text.find(END)
    return text[start + len(START): end] if 0 <= start < end else None


def check(readme: Path, package: Path = PACKAGE) -> str | None:
    """None when the document's package map is the code's; else one line saying what differs. Raises Circle."""
    held, made = readme_block(readme.read_text(encoding="utf-8")), block(package)
    if held is None:
        return f"{readme.name} has no {START} ... {END} block: add the markers where the map belongs, then --write"
    if held.strip() == made.strip():
        return None
    held_lines, made_lines = held.strip().splitlines(), made.strip().splitlines()
    for number, (old, new) in enumerate(zip(held_lines, made_lines, strict=False), 1):
        if old != new:
            return f"{readme.name}'s package map, line {number} of the block: it has {old!r}, the code gives {new!r}"
    return (f"{readme.name}'s package map has {len(held_lines)} lines, the code gives {len(made_lines)} "
            f"(next: {(held_lines + made_lines)[min(len(held_lines), len(made_lines))]!r})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=PACKAGE, help="the package folder (default: %(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", type=Path, metavar="DOC",
                      help="replace the block between the markers in DOC (docs/package-map.md)")
    mode.add_argument("--check", type=Path, metavar="DOC", help="exit 1 when the block in DOC is not the code's")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problem = check(args.check, args.package)
            if problem:
                print(f"{problem} (python scripts/package_map.py --write {args.check})", file=sys.stderr)
                return 1
        elif args.write:
            text = args.write.read_text(encoding="utf-8")
            if readme_block(text) is None:
                print(f"{args.write} has no {START} ... {END} block: add the markers first", file=sys.stderr)
                return 1
            start, end = text.index(START) + len(START), text.index(END)
            args.write.write_text(text[:start] + block(args.package) + text[end:], encoding="utf-8")
        else:
            print(block(args.package))
    except Circle as circle:
        print(f"a circle between folders: {' -> '.join(circle.args)} (a folder may import only folders below it)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
