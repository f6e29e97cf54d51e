"""No import cycle between modules anywhere (grimp's import graph, the one import-linter builds, every
import counted: module level and inside functions; TYPE_CHECKING imports left out), and the composition
root stays in small modules."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EDGES = """
import json, sys
import grimp
graph = grimp.build_graph(sys.argv[1], exclude_type_checking_imports=True)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}))
"""


def import_edges(package: str, path: Path) -> dict[str, list[str]]:
    """Module -> the modules it imports, for `package` found first on `path` (grimp walks the package's directory: in
    a checkout, gapforge's installed layout is a tree of links, .ci/installed_view.py). In a process of its own: this
    one has imported gapforge from the checkout already."""
    out = subprocess.run(
        [sys.executable, "-c", EDGES, package],
        cwd=path,
        env={**os.environ, "PYTHONPATH": str(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = edges.get(node, [])
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_import_cycle_between_our_modules(tmp_path: Path) -> None:
    build = runpy.run_path(str(ROOT / ".ci" / "installed_view.py"))["build"]
    edges = import_edges("gapforge", build(tmp_path / "tree"))
    assert "gapforge.graph.graph" in edges and "gapforge.agents.episode" in edges  # the folders are in the graph
    assert "gapforge.ui.pages_runs" in edges  # the viewer too: its pages render through ui/render.py
    assert cycles(edges) == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "gf_cycle_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "def f():\n    from gf_cycle_probe import b  # noqa: F401\n"
    )  # inside a function: still a cycle
    (pkg / "b.py").write_text("from gf_cycle_probe import a  # noqa: F401\n")
    (pkg / "c.py").write_text("from gf_cycle_probe import a  # noqa: F401\n")
    assert cycles(import_edges("gf_cycle_probe", tmp_path)) == [["gf_cycle_probe.a", "gf_cycle_probe.b"]]


ROOT_MODULES = sorted(p for p in (ROOT / "gapforge").rglob("*.py") if "recordings" not in p.parts)  # recordings: data


@pytest.mark.parametrize("path", ROOT_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_composition_root_modules_stay_small(path: Path) -> None:
    """~260 lines at most, formatted at 120 columns (the config composition excepted): one job per module."""
    if path.name == "config.py":
        return
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 260, f"{path.relative_to(ROOT)} has {lines} lines: split it by job"
