"""The import graph of ``evalcore`` and ``flows`` has no circle.

Every module's imports of the project's own modules are read from its syntax tree, at
module level and inside functions and ``TYPE_CHECKING`` blocks alike: an import put in a
function to dodge a circle still closes it, only later and harder to see. An arrow
points at the module named, not at the packages above it (``evalcore/__init__.py`` is
lazy, so importing a submodule does not load the public API; the subprocess test below
holds that for the metric interface).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("evalcore", "flows")



def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every module of the project's packages by dotted name."""
    return {
        module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
    }


def imported(tree: ast.AST, name: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The project modules that the module ``name`` imports anywhere in its body."""
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from evalcore.metrics import detection`` imports the submodule itself.
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else source)
    return {target for target in targets if target in modules and target != name}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", modules)
        for name, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of modules, in import order.

    Tarjan's algorithm finds the groups; a breadth-first walk inside a group gives the
    shortest path from its first module back to itself.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)

    found = []
    for group in groups:
        start = min(group)
        came_from: dict[str, str] = {}
        frontier = [start]
        while start not in came_from:
            following = []
            for node in frontier:
                for target in sorted(graph[node] & group):
                    if target not in came_from:
                        came_from[target] = node
                        following.append(target)
            frontier = following
        path = [start]
        while came_from[path[-1]] != start:
            path.append(came_from[path[-1]])
        found.append([start, *reversed(path[1:]), start])
    return found


def test_the_graph_reads_every_kind_of_import():
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import evalcore.crs
from . import summary
from .metrics import base
if TYPE_CHECKING:
    from evalcore.prepare import PreparedLayer
def late():
    from evalcore.metrics.detection import Detection
"""
    modules = project_modules()
    targets = imported(ast.parse(source), "evalcore.levels", False, modules)
    assert targets == {
        "evalcore.crs",
        "evalcore.summary",
        "evalcore.metrics.base",
        "evalcore.prepare",
        "evalcore.metrics.detection",
    }


def test_circles_are_named_in_order():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c", "a"]]


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(" -> ".join(circle) for circle in found)


def test_metric_interface_imports_no_family():
    code = (
        "import sys\n"
        "import evalcore.metrics.base\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('evalcore', 'flows')))\n"
        "print('\\n'.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    families = {
        name
        for name in project_modules()
        if name.startswith("evalcore.metrics.") and name not in {"evalcore.metrics.base"}
    }
    assert not loaded & families, f"evalcore.metrics.base loads {sorted(loaded & families)}"
    assert "evalcore.api" not in loaded
    assert "evalcore.metrics.base" in loaded
