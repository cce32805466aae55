"""The project's structure: no import cycle, every module in the README's Layout tree, a docstring atop each.

The import graph of the project's packages has no cycle, lazy (function-level) imports included.

A module that imports another inside a function still depends on it: a cycle through a lazy import is a
circle of concepts that only the import order keeps working. This test reads every module's source (no import
is executed), resolves each `import` / `from ... import` to the deepest project module it names, and fails
naming the modules of every cycle it finds. Importing a submodule of one's own package (`from . import gpt`)
counts as an edge to that submodule only.

    python -m pytest tests/test_layout.py -q
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "models", "tasks")


def project_modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of PACKAGES (a package by its __init__.py)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module `name` imports anywhere in its source."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    targets = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            targets += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = set()
    for target in targets:
        while target and target not in modules:   # `import a.b.c` of a name inside a.b: the module a.b
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_imports_are_resolved_to_the_deepest_module():
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert "models.backbones.gpt" in graph["models.backbones"]       # `from . import gpt`: the submodule
    assert "models.paradigm" in graph["models.setdlm"]               # `from .paradigm import ParadigmModel`
    assert "models" in graph["harness.report"]                       # `from models import get_paradigm`


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    found = [c for c in cycles(graph) if any(m.split(".")[0] == package for m in c)]
    assert not found, "import cycles (lazy imports included): " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c) + ")" for c in found)


def test_the_layout_page_names_every_module_and_the_readme_only_folders_that_exist():
    """docs/layout.md lists every module of harness/, models/ and tasks/ by its path (generated by harness.publish,
    held fresh by tests/test_docs.py); the README's short tree names only folders and files that exist."""
    page = (REPO / "docs" / "layout.md").read_text()
    missing = [path.relative_to(REPO).as_posix() for path in project_modules().values()
               if f"`{path.relative_to(REPO).as_posix()}`" not in page]
    assert not missing, f"docs/layout.md omits {missing}: python -m harness.publish"
    readme = (REPO / "README.md").read_text()
    tree = readme[readme.index("## Layout"):]
    tree = tree[tree.index("```") + 3:]
    tree = tree[:tree.index("```")]
    named = re.findall(r"(?<![\w/])((?:harness|models|tasks|results|plots|docs|tests)/[\w./]*)", tree)
    absent = [name for name in named if not (REPO / name).exists()]
    assert named and not absent, f"the README's Layout names what does not exist: {absent}"


def test_every_module_opens_with_a_docstring():
    missing = [path.relative_to(REPO).as_posix() for path in project_modules().values()
               if path.stat().st_size and ast.get_docstring(ast.parse(path.read_text())) is None]
    assert not missing, f"modules without a docstring: {missing}"
