"""Which tests failed and how: a code task's tests rewritten so the sandbox's harness reports each failure.

The sandbox's trusted harness (:mod:`rewards.code.sandbox.inside.harness`) returns a verdict
(passed / total, status) and one ``detail`` line, not what each test saw. ``code_feedback``
needs the per-test result, so this module rewrites the TESTS (trusted code, on the host, before
they are sent; the program is not touched) into a HumanEval ``check(candidate)`` whose
statements record their failures and whose last statement raises them as one message::

    assert candidate(8) == 8            ->   test 6: f(8) returned 16, expected 8
    assert candidate(0) == 1 (raises)   ->   test 3: ZeroDivisionError: integer division or modulo by zero
    assert is_ok(candidate(3))          ->   test 4 failed          (no values to report: the source stays hidden)

Only an ``assert L == R`` is reported with values: the call ``L`` (``candidate`` shown as the
function's name) and the two values the harness compared; any other failing test is reported by
its number and, when it raised, the exception line. The test source itself never appears.
Counting is the harness's: each top-level statement of ``check`` that holds an assert is one test
(MBPP: each assert line), so the numbers agree with the verifier's ``passed`` / ``total``.

The comparisons, the values and the messages all stay in the harness process (the program never
sees them); the report is read back from the verdict's ``detail``. The rewritten suite is only
for feedback: the reward is still the task's own verifier on the unmodified tests.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from rewards.code.formats import FunctionalTests, StdioTests, Tests
from rewards.code.pyast import parse

REPORT_PREFIX = "check() raised AssertionError: "
"""How the harness's ``detail`` starts when the report statement raised (harness.py)."""
MAX_REPORTED = 5
"""Failures carried in one report (the harness keeps 500 characters of ``detail``)."""
MAX_VALUE_CHARS = 40
"""Longest repr of a value in a message; longer ones are cut with ``...``."""

# Trusted helpers, defined in the test namespace before check(). Names start with "__" so the
# harness never looks them up in the program (harness._TrustedGlobals).
_HELPERS = f'''
__rl_fb_msgs__ = {{}}
def __rl_fb_short__(value):
    text = repr(value)
    return text if len(text) <= {MAX_VALUE_CHARS} else text[:{MAX_VALUE_CHARS - 3}] + "..."
def __rl_fb_eq__(i, src, got, expected):
    if got == expected:
        return True
    __rl_fb_msgs__.setdefault(i, f"test {{i}}: {{src}} returned {{__rl_fb_short__(got)}}, "
                                 f"expected {{__rl_fb_short__(expected)}}")
    return False
def __rl_fb_raised__(i, exc):
    if not isinstance(exc, AssertionError):
        __rl_fb_msgs__.setdefault(i, f"test {{i}}: {{type(exc).__name__}}: {{str(exc)[:80]}}")
    __rl_fb_msgs__.setdefault(i, f"test {{i}} failed")
def __rl_fb_report__():
    if __rl_fb_msgs__:
        raise AssertionError("\\n".join(__rl_fb_msgs__[i] for i in sorted(__rl_fb_msgs__)[:{MAX_REPORTED}]))
'''


@dataclass(frozen=True)
class TestReport:
    """One attempt against its tests, as the harness saw it."""

    status: str
    """The sandbox's status: ``passed``, ``failed``, ``timeout`` or ``error`` (the program did not load
    or its process died), or ``unscorable`` (no code, or the tests themselves cannot run)."""
    passed: int
    total: int
    failures: tuple[str, ...] = ()
    """One line per failed test reported (at most :data:`MAX_REPORTED`), in test order."""
    detail: str = ""
    """The harness's own line when no per-test lines exist (a load error, a crash)."""


class _Rewrite(ast.NodeTransformer):
    """``assert L == R`` -> ``assert __rl_fb_eq__(i, "<L shown>", L, R)`` inside test ``i``."""

    def __init__(self, index: int, param: str | None, shown_as: str) -> None:
        self.index, self.param, self.shown_as = index, param, shown_as

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            call = ast.Call(func=ast.Name("__rl_fb_eq__", ast.Load()),
                            args=[ast.Constant(self.index), ast.Constant(self._shown(test.left)), test.left,
                                  test.comparators[0]], keywords=[])
            return ast.copy_location(ast.Assert(test=call, msg=None), node)
        return node

    def _shown(self, expr: ast.expr) -> str:
        """The source of ``expr`` with the check's parameter (``candidate``) named as the function."""
        expr = _Rename(self.param, self.shown_as).visit(parse(ast.unparse(expr), mode="eval")).body
        return ast.unparse(expr)


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str | None, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name(self.new, node.ctx) if self.old is not None and node.id == self.old else node


def _holds_assert(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(stmt))


def _guarded(stmt: ast.stmt, index: int) -> ast.stmt:
    """``try: stmt except Exception as e: record(index, e); raise`` (the harness still sees the failure)."""
    guard = parse("try:\n    pass\nexcept Exception as __rl_fb_exc__:\n"
                      f"    __rl_fb_raised__({index}, __rl_fb_exc__)\n    raise").body[0]
    guard.body = [stmt]  # type: ignore[attr-defined]
    return guard


def reporting_check(check_source: str, entry_point: str) -> str:
    """HumanEval test code (``def check(candidate): ...``) rewritten to report each failed test."""
    tree = parse(check_source)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise ValueError("the test code defines no check(candidate) function")
    check = checks[-1]
    param = check.args.args[0].arg if check.args.args else None
    body: list[ast.stmt] = []
    index = 0
    for stmt in check.body:
        if not _holds_assert(stmt):
            body.append(stmt)
            continue
        index += 1
        body.append(_guarded(_Rewrite(index, param, entry_point).visit(stmt), index))
    body.append(ast.Expr(ast.Call(func=ast.Name("__rl_fb_report__", ast.Load()), args=[], keywords=[])))
    check.body = body
    tree.body = parse(_HELPERS).body + tree.body
    return ast.unparse(ast.fix_missing_locations(tree))


def _defined_names(source: str) -> set[str]:
    """Names the trusted setup code binds at top level (imports, defs, assignments)."""
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def function_under_test(asserts: Sequence[str], setup: str = "") -> str | None:
    """The function MBPP-style assert lines call (the first called name that is not a builtin and not
    defined by the setup code; when every called name is a builtin, the first one: MBPP's ``def sum``)."""
    # The trusted harness's own rule (it picks the same function when it runs the tests).
    from rewards.code.sandbox.inside.harness import _functions_under_test

    names = _functions_under_test(asserts, dict.fromkeys(_defined_names(setup)))
    return names[0] if names else None


def reporting_suite(tests: Tests) -> Tests:
    """``tests`` in the form that reports each failure (stdin/stdout tests report per case already)."""
    if isinstance(tests, StdioTests):
        return tests
    if tests.check is not None:
        return FunctionalTests(check=reporting_check(tests.check, str(tests.entry_point)),
                               entry_point=tests.entry_point, setup=tests.setup)
    entry = function_under_test(tests.asserts, tests.setup)
    if entry is None:
        return tests  # no function is called: nothing to report values of
    body = "".join("    " + line + "\n" for src in tests.asserts for line in src.strip("\n").splitlines())
    check = reporting_check(f"def check({entry}):\n{body}", entry)
    return FunctionalTests(check=check, entry_point=entry, setup=tests.setup)


def read_report(status: str, passed: int, total: int, detail: str, cases: Sequence[dict] = ()) -> TestReport:
    """A :class:`TestReport` from the sandbox's verdict on a :func:`reporting_suite`."""
    if cases:  # stdin/stdout: the harness judged each case
        failures = tuple(
            f"test {i}: " + ("timed out" if c.get("status") == "timeout"
                             else f"exited with status {c.get('exit')}" if c.get("exit") not in (0, None)
                             else "wrong output")
            for i, c in enumerate(cases, 1) if not c.get("passed"))[:MAX_REPORTED]
        return TestReport(status, passed, total, failures)
    if detail.startswith(REPORT_PREFIX):
        return TestReport(status, passed, total, tuple(detail[len(REPORT_PREFIX):].splitlines()))
    return TestReport(status, passed, total, (), detail)
