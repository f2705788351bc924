"""The line that cannot regrow (issue 43): no module of the product over 400 lines, and no import cycle.

The import graph is grimp's (PyPI ``grimp``, the graph behind import-linter): it reads every ``import`` in
the source, at module level, inside functions and under ``if TYPE_CHECKING:``, so an import moved into a
function to dodge a cycle is still a cycle here. Strongly connected components of that graph (Tarjan's
algorithm) are the cycles; each is reported with the line of every import in it.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reasoning_rl", "rewards", "benchmarks")
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_over_the_line_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, (f"modules over {MAX_LINES} lines: {long}; split each by job (one module, one job), "
                      "not by line count")


def strongly_connected(adjacency: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of size > 1 (an iterative version: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(adjacency):
        if root in index:
            continue
        work = [(root, iter(adjacency[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(adjacency.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
    return out


def test_strongly_connected_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": []}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": ["b"], "b": []}) == []


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_no_import_cycle(graph: grimp.ImportGraph) -> None:
    adjacency = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = []
    for component in strongly_connected(adjacency):
        lines = [f"{a} -> {b} (line {', '.join(str(d['line_number']) for d in details)})"
                 for a in component for b in adjacency[a] if b in component
                 for details in [graph.get_import_details(importer=a, imported=b)]]
        cycles.append("; ".join(lines))
    assert not cycles, "import cycles: " + " | ".join(cycles)


def test_the_graph_sees_imports_inside_functions(graph: grimp.ImportGraph) -> None:
    """What the cycle test relies on: an import inside a function is an edge (reasoning_rl/cli.py imports
    the trainer inside train_main, so that a refused command line answers before torch loads)."""
    inside = graph.get_import_details(importer="reasoning_rl.cli", imported="reasoning_rl.trainer")
    assert inside, "grimp no longer reports reasoning_rl.cli's import of the trainer inside train_main"
