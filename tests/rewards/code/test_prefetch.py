"""Calls planned from a test's source and sent to the candidate ahead (rewards/code/sandbox/inside/prefetch.py).

The plan is a table of (test source, expected planned calls); the sandbox tests check that a
program whose functions keep state gets exactly the verdict of one-call-at-a-time execution, also
when the plan turns out wrong and the program is run again.
"""

from __future__ import annotations

import ast

import pytest

from rewards.code import FunctionalTests
from rewards.code.sandbox import Sandbox
from rewards.code.sandbox.inside.prefetch import plan

CALLEES = {"candidate": "f", "f": "f"}


@pytest.mark.parametrize(("body", "expected"), [
    # each assert calls f once with literal arguments: all planned, in order
    ("assert candidate([1, 2]) == 3\nassert candidate(-1, k='x') == 0",
     [("f", ([1, 2],), {}), ("f", (-1,), {"k": "x"})]),
    # the call is evaluated whatever happens: inside abs(), the left of a comparison, under `not`
    ("assert abs(candidate(0.5) - 1.0) < 1e-6\nassert 4 == candidate((2, 2))\nassert not candidate(None)",
     [("f", (0.5,), {}), ("f", ((2, 2),), {}), ("f", (None,), {})]),
    # `assert True` touches nothing of the program: passed over
    ("assert True\nassert candidate(1) == 1", [("f", (1,), {})]),
    # stops at the first statement it cannot be sure of, keeping what came before
    ("assert candidate(1) == 1\nx = [2]\nassert candidate(*x) == 2", [("f", (1,), {})]),
    ("assert candidate(1) == 1\nassert candidate(2) == candidate(3)\nassert candidate(4)", [("f", (1,), {})]),
    ("assert candidate(1) == 1\nassert candidate(candidate(2)) == 1", [("f", (1,), {})]),
    ("assert candidate(1) == 1\nassert candidate([i for i in range(3)]) == 0", [("f", (1,), {})]),
    # conditional calls: the right of `or`, a branch, the later links of a chain, a lambda, the message
    ("assert x or candidate(1)", []),
    ("assert candidate(1) if y else 0", []),
    ("assert 0 < 1 < candidate(1)", []),
    ("assert (lambda: candidate(1))()", []),
    ("assert z, candidate(1)", []),
    # a chained comparison's first two operands are always evaluated
    ("assert 0 < candidate(1) < 9", [("f", (1,), {})]),
])
def test_plan_lists_the_calls_that_certainly_happen(body: str, expected: list) -> None:
    assert plan(ast.parse(body).body, CALLEES) == expected


CALLS_COUNTED = "calls = []\ndef f(x):\n    calls.append(x)\n    return len(calls)\n"


def test_stateful_program_gets_the_one_call_at_a_time_verdict(box: Sandbox) -> None:
    # f returns how many times it was called: any reordering or extra call would change the results.
    check = ("def check(candidate):\n"
             "    assert candidate(1) == 1\n"
             "    assert candidate(2) == 2\n"
             "    assert candidate('x') == 3\n"
             "    assert candidate(9) == 5\n")      # 4th call: fails
    result = box.execute(FunctionalTests(check=check, entry_point="f").job(CALLS_COUNTED, 5.0, {}))
    assert (result.status, result.passed, result.total) == ("failed", 3, 4)


def test_wrong_plan_runs_the_program_again(box: Sandbox) -> None:
    # helper() calls f behind the plan's back, before the planned candidate(2) on its line:
    # one call at a time, f(9) is the 2nd call and candidate(2) the 3rd (2 + 1 == 3). Ahead of
    # time C would have run candidate(2) 2nd; the harness sees the unplanned call, and the program
    # runs again from a fresh process with no plan.
    check = ("def helper():\n    return f(9)\n"
             "def check(candidate):\n"
             "    assert candidate(1) == 1\n"
             "    assert helper() + 1 == candidate(2)\n"
             "    assert candidate(3) == 4\n")
    result = box.execute(FunctionalTests(check=check, entry_point="f").job(CALLS_COUNTED, 5.0, {}))
    assert (result.status, result.passed, result.total) == ("passed", 3, 3)


def test_program_dying_mid_batch_keeps_the_answers_before(box: Sandbox) -> None:
    # Replies stream one per call: the two answered before the process ended still count.
    program = "import os\ndef f(x):\n    if x == 3:\n        os._exit(0)\n    return x\n"
    tests = FunctionalTests(asserts=("assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3", "assert f(4) == 4"))
    result = box.execute(tests.job(program, 5.0, {}))
    assert (result.status, result.passed, result.total) == ("error", 2, 4)
    assert "early_exit" in result.tamper
