"""The rewritten tests report each failed test (values for ``assert L == R``, the exception line
otherwise) through the real sandbox harness, and never the test source."""

from __future__ import annotations

import pytest

from reasoning_rl.envs.failure_report import function_under_test, read_report, reporting_suite
from rewards.code import FunctionalTests, StdioTests, run_tests

CHECK = """def check(candidate):
    assert candidate(-7) == -4
    assert candidate(0) == 3
    assert candidate(8) == 11
    assert abs(candidate(1) - 4) < 1e-9
"""


def report_of(program: str, tests) -> object:
    result = run_tests(program, 5.0, tests=reporting_suite(tests))
    return read_report(result.status, result.passed, result.total, result.detail, result.cases)


def test_each_failed_equality_is_reported_with_its_call_and_values():
    # f(x) = x * 2: f(-7) = -14 (want -4), f(0) = 0 (want 3), f(8) = 16 (want 11), |f(1) - 4| = 2: all fail.
    report = report_of("def f(x):\n    return x * 2\n", FunctionalTests(check=CHECK, entry_point="f"))
    assert (report.status, report.passed, report.total) == ("failed", 0, 4)
    assert report.failures == ("test 1: f(-7) returned -14, expected -4",
                               "test 2: f(0) returned 0, expected 3",
                               "test 3: f(8) returned 16, expected 11",
                               "test 4 failed")  # not an equality: no values, and no source
    assert not any("abs" in line or "candidate" in line for line in report.failures)


def test_the_count_matches_the_verifier_and_a_pass_reports_nothing():
    # f(x) = x + 3 passes all four; f(x) = x + 3 if x else 0 fails test 2 only.
    ok = report_of("def f(x):\n    return x + 3\n", FunctionalTests(check=CHECK, entry_point="f"))
    assert (ok.status, ok.passed, ok.total, ok.failures) == ("passed", 4, 4, ())
    one = report_of("def f(x):\n    return x + 3 if x else 0\n", FunctionalTests(check=CHECK, entry_point="f"))
    assert (one.passed, one.total, one.failures) == (3, 4, ("test 2: f(0) returned 0, expected 3",))
    plain = run_tests("def f(x):\n    return x + 3 if x else 0\n", 5.0, tests=FunctionalTests(check=CHECK, entry_point="f"))
    assert (plain.passed, plain.total) == (3, 4)  # the unmodified tests agree


def test_an_exception_is_reported_by_its_line():
    report = report_of("def f(x):\n    return 1 // x\n", FunctionalTests(check=CHECK, entry_point="f"))
    assert report.failures[1] == "test 2: ZeroDivisionError: integer division or modulo by zero"


def test_a_program_that_does_not_load_gives_the_harness_line():
    report = report_of("def f(x):\n    return x +\n", FunctionalTests(check=CHECK, entry_point="f"))
    assert report.status == "error" and report.failures == ()
    assert report.detail.startswith("the program failed to load: SyntaxError")


def test_mbpp_asserts_are_reported_by_the_function_they_call():
    tests = FunctionalTests(asserts=("assert add_one(1) == 2", "assert add_one(5) == 6", "assert set(add_one(0)) == {1}"))
    assert function_under_test(tests.asserts) == "add_one"
    report = report_of("def add_one(x):\n    return x + 2\n", tests)
    assert (report.passed, report.total) == (0, 3)
    assert report.failures == ("test 1: add_one(1) returned 3, expected 2", "test 2: add_one(5) returned 7, expected 6",
                               "test 3: TypeError: 'int' object is not iterable")


def test_long_values_are_cut():
    tests = FunctionalTests(asserts=("assert g() == [0]",))
    report = report_of("def g():\n    return list(range(100))\n", tests)
    [line] = report.failures
    assert line.startswith("test 1: g() returned [0, 1, 2") and "..., expected [0]" in line and len(line) < 90


@pytest.mark.parametrize("program, expected", [
    ("print(input())", ("test 2: wrong output",)),
    ("import sys; print(input()); sys.exit(3)", ("test 1: exited with status 3", "test 2: exited with status 3")),
])
def test_stdio_cases_are_reported_per_case(program, expected):
    report = report_of(program, StdioTests(cases=(("a", "a"), ("b", "c"))))
    assert report.failures == expected
