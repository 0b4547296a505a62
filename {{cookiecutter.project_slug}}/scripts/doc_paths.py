"""The paths the documentation names, each checked against the tree: a moved or renamed file cannot leave a doc behind.

    python scripts/doc_paths.py      # prints every path named that is not there; exit status 1 when there is one

What counts as a path (tests/test_docs.py holds the README, docs/ and the docstrings to it):
- Where it is looked for: in Markdown, each word of a `code span` or a fenced block, and a link's target; in Python,
  each word of a docstring (module, class, function: read with ast).
- What it is: a word of path characters only (letters, digits, `_ . - / < >`; a line number `:12` or a test's `::name` after it dropped)
  that either has a `/` and starts with a name the repository has (a file or folder at a base: the project's root,
  its package; the package's own name, or `<pkg>` for it), or has no `/` and ends in a source file's extension
  (SOURCE). So `torch/optim/adam.py` (torch's) and `glue/mrpc` (a hub id) are not this repository's paths.
- What is left out: what a run or a make target writes (WRITTEN: `outputs/...`), an absolute or home path, and
  the files the docs name as someone else's (NOT_OURS); `train.py` stands for the command line in every project
  (COMMAND_LINE).
- Where it must be: a path with a `/` at one of the bases, `<pkg>/` meaning the package; a bare file name anywhere in
  the tree; a link's target beside the document that links it, and its `#anchor` a heading of the document it names.
So `<pkg>/training.py` fails where the module is `<pkg>/loop/training.py`, and so does `loop/trainer.py`.
Standard library only, and no template tags: the template's own tests load this file to check its top-level docs.
"""

import ast
import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

SOURCE = (".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".jinja")
WRITTEN = {"outputs", "benchmark-results", "build", "~"}
# Files the docs name as someone else's: transformers' example scripts, MaxText's compile-only script, and a user's own
# module in an example of the recompilation watch's message.
NOT_OURS = {"run_clm.py", "run_glue.py", "train_compile.py", "train_extra.py"}
# What the docs call the command line in every project, though one baked without the script runs it as
# `python -m <pkg>.cli` (its train.py's flags are the same).
COMMAND_LINE = "train.py"
PATH = re.compile(r"[\w.<>-]+(/[\w.<>-]*)*")
SKIPPED_FOLDERS = {".git", "__pycache__", "node_modules", ".ruff_cache", ".pytest_cache"}
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"\]\(([^)\s]+)\)")
SPAN = re.compile(r"(`+)(.+?)\1")


def words(text: str) -> list[str]:
    """The words of `text` that could be paths, their surrounding punctuation stripped."""
    found = []
    for raw in re.split(r"[\s=,;|]+", text):
        word = raw.strip("`'\"()[]{}!?*")
        word = re.sub(r"::\S*$|:\d+$", "", word).rstrip(".:").strip("`'\"()[]{}")
        if word:
            found.append(word)
    return found


def markdown_candidates(text: str) -> tuple[list[str], list[str]]:
    """(the words of code spans and fenced blocks, the link targets) of a Markdown text."""
    names, links, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            names += words(line)
            continue
        links += [target for target in LINK.findall(line) if "://" not in target and not target.startswith("mailto:")]
        names += [word for _, span in SPAN.findall(line) for word in words(span)]
    return names, links


def docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(node for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [text for node in nodes if (text := ast.get_docstring(node))]


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


class Tree:
    """The repository the docs describe: its bases (the first the root), and `<pkg>` and the package's name."""

    def __init__(self, bases: list[Path], package: Path, names: tuple[str, ...] = ()):
        """`names`: other names the docs give the package (the template's docs: the default bakes' slugs)."""
        self.bases, self.package = [Path(base) for base in bases], Path(package)
        self.aliases = {name: self.package for name in ("<pkg>", self.package.name, *names)}
        self.firsts = set(self.aliases) | {entry.name for base in self.bases if base.is_dir() for entry in base.iterdir()}
        self.names = set()
        for _, subfolders, files in os.walk(self.bases[0]):
            subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS and not name.startswith(".venv")
                             and name not in WRITTEN]
            self.names.update(files)

    def is_path(self, word: str) -> bool:
        if not PATH.fullmatch(word) or word.startswith("/") or word.split("/")[0] in WRITTEN:
            return False
        if "/" in word:
            return word.split("/")[0] in self.firsts
        return word.endswith(SOURCE) and word not in NOT_OURS

    def written(self, path: Path) -> bool:
        """Whether `path` lies in what a run writes (a link to the picture a run draws)."""
        relative = os.path.relpath(path.resolve(), self.bases[0].resolve())
        return relative.split(os.sep)[0] in WRITTEN

    def exists(self, word: str) -> bool:
        if "/" not in word:
            return word in self.names or word == COMMAND_LINE
        first, _, rest = word.partition("/")
        if first in self.aliases and (self.aliases[first] / rest).exists():
            return True
        return any((base / word).exists() for base in self.bases)

    def missing_in_markdown(self, document: Path) -> list[str]:
        names, links = markdown_candidates(document.read_text(encoding="utf-8"))
        missing = [name for name in names if self.is_path(name) and not self.exists(name)]
        for link in links:
            target, _, anchor = link.partition("#")
            target = unquote(target)  # a link's path as a browser reads it: %7B is "{"
            where = (document.parent / target) if target else document
            if target and self.written(where):
                continue
            if not where.exists():
                missing.append(link)
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                missing.append(link)
        return [f"{document}: {name}" for name in dict.fromkeys(missing)]

    def missing_in_docstrings(self, source: Path) -> list[str]:
        missing = [word for text in docstrings(source) for word in words(text)
                   if self.is_path(word) and not self.exists(word)]
        return [f"{source}: {word}" for word in dict.fromkeys(missing)]


def project_documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def project_sources(root: Path, package: Path) -> list[Path]:
    """The Python files whose docstrings are the project's: the package, the entry points and scripts/ (but this
    one, whose docstring names wrong paths on purpose)."""
    files = [*package.rglob("*.py"), *root.glob("*.py"), *(root / "scripts").glob("*.py")]
    return sorted(path for path in files if path.name != Path(__file__).name)


def project_package(root: Path) -> Path:
    """The package: the one folder at the root with a command line (cli.py)."""
    (package,) = [path.parent for path in root.glob("*/cli.py")]
    return package


def missing(root: Path) -> list[str]:
    """Every path that this project's README, docs/ and docstrings name and its tree lacks."""
    package = project_package(root)
    tree = Tree([root, package], package)
    found = [line for document in project_documents(root) for line in tree.missing_in_markdown(document)]
    return found + [line for source in project_sources(root, package) for line in tree.missing_in_docstrings(source)]


if __name__ == "__main__":
    problems = missing(Path(__file__).resolve().parent.parent)
    print("\n".join(problems) or "every path named is there")
    sys.exit(1 if problems else 0)
