"""The calls a test will certainly make, read from its source before it runs (in Z, trusted).

Every call of the program's functions is a round trip harness -> C -> harness (two messages, two
wake-ups): ~0.2 ms of CPU each, most of a HumanEval program's cost after its fresh process. Most
tests are a run of asserts that each call a function under test once, with literal arguments:
``assert candidate([1, 2, 3]) == 6``, ``assert abs(candidate(0.5) - 1.0) < 1e-6``. Those calls are
known before the test runs. :func:`plan` lists them; the harness sends them to C in ONE message
when the test makes the first of them, C runs them in that order and streams one reply per call,
and the test, running as written, takes each reply as it makes the same call.

Why the verdict cannot change: C executes exactly the calls the test makes, in the test's order,
and the test itself still runs statement by statement in the harness. The harness checks this as it
goes (:class:`~.harness.Channel`): a call that is not the next planned one, a name fetched from the
program while planned calls are pending, or planned calls left unconsumed mean the plan was wrong;
the program is then run again from a fresh process without a plan (the zygote does that).

A call counts only when it is evaluated whatever happens before it: not in the right operand of
``and``/``or``, a branch of ``x if c else y``, the later links of a chained comparison, a lambda or
comprehension, or the assert's message. Planning stops at the first statement that calls anything
else of the program's, or calls it more than once.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

PlannedCall = tuple[str, tuple[Any, ...], dict[str, Any]]
"""(name of the function under test in C's namespace, positional arguments, keyword arguments)."""

_DEFERRED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def plan(statements: Sequence[ast.stmt], callees: Mapping[str, str]) -> list[PlannedCall]:
    """The calls the leading ``statements`` make, in order.

    ``callees``: the names the test code calls the program's functions by -> the function's name in
    C (HumanEval: ``{"candidate": entry_point, entry_point: entry_point}``). Statements that use none
    of them and call nothing (``assert True``) are passed over; planning stops at the first
    statement that is not an assert making exactly one unconditional call with literal arguments.
    """
    planned: list[PlannedCall] = []
    for stmt in statements:
        calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
        remote = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id in callees]
        names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        if not calls and not names & callees.keys():
            continue
        if not isinstance(stmt, ast.Assert) or len(remote) != 1 or not _unconditional(stmt.test, remote[0]):
            break
        literal = _literal_arguments(remote[0])
        if literal is None:
            break
        planned.append((callees[remote[0].func.id], *literal))  # type: ignore[union-attr]
    return planned


def _literal_arguments(call: ast.Call) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    try:
        args = tuple(ast.literal_eval(a) for a in call.args)
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return args, kwargs


def _unconditional(root: ast.expr, target: ast.Call) -> bool:
    """Whether evaluating ``root`` always evaluates ``target`` (a node inside it)."""
    path = _path(root, target)
    if path is None:
        return False
    for parent, child in itertools.pairwise(path):
        if isinstance(parent, _DEFERRED):
            return False
        if isinstance(parent, ast.BoolOp) and child is not parent.values[0]:
            return False
        if isinstance(parent, ast.IfExp) and child is not parent.test:
            return False
        if isinstance(parent, ast.Compare) and child is not parent.left and child is not parent.comparators[0]:
            return False
    return True


def _path(node: ast.AST, target: ast.AST) -> list[ast.AST] | None:
    if node is target:
        return [node]
    for child in ast.iter_child_nodes(node):
        found = _path(child, target)
        if found is not None:
            return [node, *found]
    return None
