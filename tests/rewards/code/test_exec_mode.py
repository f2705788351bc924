"""The code verifier's second harness mode (``harness="exec"``) and the code audit built on it.

The two modes agree on honest programs (right or wrong) and disagree where the harness decides:
a program that exits before the tests or returns an always-equal object passes under ``exec``
(the verdict is the exit status of program + tests in one process) and fails under ``trusted``.
"""

from __future__ import annotations

import pytest

from rewards import get_verifier
from rewards.audit import VerifierAudit
from rewards.code.exec_mode import exec_tests
from rewards.code.formats import FunctionalTests, StdioTests
from rewards.pool import WorkerPool
from rewards.specs import AuditConfig

MBPP = {"test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
HUMANEVAL = {"prompt": 'def inc(x):\n    """x + 1"""\n', "entry_point": "inc",
             "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n"}

RIGHT = "```python\ndef add(a, b):\n    print('adding')\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
EXITS_EARLY = "```python\nimport sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n```"
ALWAYS_EQUAL = "```python\nclass E:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return E()\n```"


def test_exec_tests_makes_one_case_per_assert_and_one_for_check() -> None:
    program, tests = exec_tests("def add(a, b):\n    return a + b", FunctionalTests(asserts=("assert 1", "assert 2")), 5.0)
    assert isinstance(tests, StdioTests) and tests.cases == (("0", ""), ("1", "")) and tests.case_timeout == 5.0
    assert "def add" in program
    _, check = exec_tests("def inc(x):\n    return x + 1", FunctionalTests(check="def check(c): pass", entry_point="inc"),
                          5.0)
    assert isinstance(check, StdioTests) and len(check.cases) == 1
    stdio = StdioTests(cases=(("1", "1"),))
    assert exec_tests("print(input())", stdio, 5.0) == ("print(input())", stdio)


@pytest.mark.parametrize(("completion", "fields", "score"), [
    (RIGHT, MBPP, 1.0),  # its print does not matter: fd 1 goes to /dev/null
    (WRONG, MBPP, 0.0),
    ("    return x + 1\n", HUMANEVAL, 1.0),
    ("    return x\n", HUMANEVAL, 0.0),
])
def test_the_two_modes_agree_on_honest_programs(completion: str, fields: dict, score: float) -> None:
    trusted, plain = get_verifier("code")(completion, None, **fields), get_verifier("code", harness="exec")(
        completion, None, **fields)
    assert (trusted.score, plain.score) == (score, score)
    assert plain.info["harness"] == "exec"


def test_exec_mode_partial_credit_counts_asserts() -> None:
    half = "```python\ndef add(a, b):\n    return 3\n```"  # passes add(1, 2) == 3 only
    assert get_verifier("code", harness="exec", partial_credit=True)(half, None, **MBPP).score == 0.5


@pytest.mark.parametrize("completion", [EXITS_EARLY, ALWAYS_EQUAL])
def test_the_modes_disagree_where_the_harness_decides(completion: str) -> None:
    assert get_verifier("code")(completion, None, **MBPP).score == 0.0
    assert get_verifier("code", harness="exec")(completion, None, **MBPP).score == 1.0


def test_code_audit_with_the_exec_harness_logs_the_disagreements() -> None:
    # Four completions, all audited. trusted: 1, 0, 0, 0. exec: 1, 0, 1, 1.
    # Two disagreements, both "ours fails, theirs passes"; rate 2/4.
    completions = [RIGHT, WRONG, EXITS_EARLY, ALWAYS_EQUAL]
    fields = [MBPP] * 4
    ours_verifier = get_verifier("code")
    ours = [ours_verifier(c, None, **MBPP) for c in completions]
    audit = VerifierAudit(AuditConfig(verifier="code", fraction=1.0, options={"harness": "exec"}))
    with WorkerPool(1) as pool:
        report = audit.run(completions, [None] * 4, fields, ours, step_seed=0, pool=pool)
    assert report.metrics["audit/ours_fail_theirs_pass"] == 2
    assert report.metrics["audit/ours_pass_theirs_fail"] == 0
    assert report.metrics["audit/disagree_rate"] == 0.5
    assert [row["index"] for row in report.rows] == [2, 3]


def test_unknown_harness_mode_lists_the_modes() -> None:
    with pytest.raises(ValueError, match=r"unknown harness mode 'plain'.*trusted.*exec"):
        get_verifier("code", harness="plain")
