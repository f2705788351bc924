"""The code verifier: run a model's program against tests in a sandbox, score the outcome.

    from rewards.code import run_tests, FunctionalTests
    result = run_tests("def add(a, b):\\n    return a + b", tests=FunctionalTests(asserts=("assert add(1, 2) == 3",)))
    result.status, result.passed, result.total        # ('passed', 1, 1)

    verifier = rewards.get_verifier("code", partial_credit=True)
    verifier(completion, None, prompt=..., test=..., entry_point=...)   # HumanEval row
    verifier(completion, None, test_list=[...], test_imports=[...])     # MBPP row
    verifier(completion, None, inputs=[...], outputs=[...])             # stdin/stdout cases

Every program runs in the sandbox of :mod:`rewards.code.sandbox` (the trust boundary; read its
docstring for what is and is not isolated). Dataset fields -> test formats: :mod:`rewards.code.formats`.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from rewards.code.exec_mode import HARNESS_MODES, HarnessMode, exec_tests
from rewards.code.extract import EXTRACT_MODES, ExtractMode, extract_code
from rewards.code.formats import FunctionalTests, MissingFieldError, StdioTests, Tests, build
from rewards.code.sandbox import (
    LEVELS,
    ExecutionResult,
    IsolationLevel,
    Limits,
    SandboxError,
    SandboxPool,
    default_workers,
    detect_isolation,
)
from rewards.code.sandbox.inside.tamper import KINDS as TAMPER_KINDS
from rewards.registry import register_verifier
from rewards.types import VerifierResult

__all__ = [
    "EXTRACT_MODES",
    "HARNESS_MODES",
    "LEVELS",
    "CodeVerifier",
    "ExecutionResult",
    "ExtractMode",
    "FunctionalTests",
    "HarnessMode",
    "IsolationLevel",
    "Limits",
    "MissingFieldError",
    "SandboxError",
    "StdioTests",
    "Tests",
    "build",
    "detect_isolation",
    "extract_code",
    "get_pool",
    "isolation_level",
    "run_tests",
    "run_tests_batch",
]

_pools: dict[tuple[int, str, int], SandboxPool] = {}
_pools_lock = threading.Lock()


def get_pool(isolation: str | None = None, num_workers: int | None = None) -> SandboxPool:
    """This process's pool of sandboxes for ``isolation`` (started lazily, one zygote per worker,
    two workers per core by default).

    Keyed by pid: a forked child (a ``score_batch`` worker) builds its own and never talks to
    its parent's zygotes.
    """
    level = detect_isolation(isolation)
    workers = max(1, num_workers or default_workers())
    key = (os.getpid(), level, workers)
    with _pools_lock:
        if key not in _pools:
            _pools[key] = SandboxPool(workers, level)
            atexit.register(_pools[key].close)
        return _pools[key]


def isolation_level(isolation: str | None = None) -> IsolationLevel:
    """The isolation level programs run under here (``bwrap`` > ``unshare`` > ``rlimits``)."""
    return detect_isolation(isolation)


def run_tests(program: str, timeout: float = 10.0, *, tests: Tests, limits: Limits | None = None,
              isolation: str | None = None) -> ExecutionResult:
    """Run ``program`` against ``tests`` in a fresh sandboxed process.

    ``timeout``: wall-clock seconds for loading the program and running every functional test
    (stdin/stdout tests use ``tests.case_timeout`` per case). Raises :class:`SandboxError` only
    when the sandbox itself cannot start; everything the program does is in the result.
    """
    return run_tests_batch([program], [tests], timeout, limits=limits, isolation=isolation, num_workers=1)[0]


def run_tests_batch(programs: Sequence[str], tests: Sequence[Tests], timeout: float = 10.0, *,
                    limits: Limits | None = None, isolation: str | None = None,
                    num_workers: int | None = None) -> list[ExecutionResult]:
    """:func:`run_tests` for many programs in parallel (default: two sandbox workers per core); in order."""
    if len(programs) != len(tests):
        raise ValueError(f"got {len(programs)} programs but {len(tests)} test suites")
    limit_fields = asdict(limits or Limits())
    jobs = [t.job(p, timeout, limit_fields) for p, t in zip(programs, tests)]
    pool = get_pool(isolation, None if num_workers is None else num_workers)
    return pool.run_many(jobs) if len(jobs) > 1 else [pool.run(jobs[0])]


@register_verifier("code")
class CodeVerifier:
    """Reward = fraction of tests passed (``partial_credit``) or 1.0 only if all pass.

    A program that fails, crashes or times out scores 0.0 (status ``ok``): that is the
    program's fault, and a policy must not learn that looping forever avoids a low reward.
    ``timeout`` (5 s) is CPU time; its wall-clock backstop (1.5x + 1 s = 8.5 s, see
    :mod:`rewards.code.sandbox.inside.clock`) stays below ``score_batch``'s default 10 s so that
    the sandbox, not the batch worker, reports a looping or sleeping program.
    ``info["tamper"]``: the kinds of attempts to game the tests (:mod:`.sandbox.inside.tamper`),
    present only when there were some; ``tamper_penalty`` (default None: off) is then the score,
    whatever the tests said (e.g. 0.0, or -1.0 to push the policy away from the attempt).
    ``harness``: ``trusted`` (default: the tests run in the sandbox's harness process) or ``exec``
    (program and tests in one candidate process, verdict by exit status; the verifier audit's
    second opinion for code, :mod:`rewards.code.exec_mode`).
    """

    tamper_kinds: tuple[str, ...] = TAMPER_KINDS
    """The tamper kinds this verifier reports: logged as ``reward/tamper/<kind>`` in training.
    ``unscorable`` (score None): no code could be extracted, the row lacks test fields, or the
    tests themselves are broken. ``error`` (None): the sandbox could not start.
    """

    def __init__(self, extract: ExtractMode = "auto", partial_credit: bool = False, timeout: float = 5.0,
                 case_timeout: float = 2.0, memory_mb: int = 1024, isolation: str | None = None,
                 include_challenge_tests: bool = False, tamper_penalty: float | None = None,
                 harness: HarnessMode = "trusted") -> None:
        if extract not in EXTRACT_MODES:
            raise ValueError(f"unknown extraction mode {extract!r}; choose one of {EXTRACT_MODES}")
        if tamper_penalty is not None and not (isinstance(tamper_penalty, (int, float))
                                               and math.isfinite(tamper_penalty)):
            raise ValueError(f"tamper_penalty must be a finite number or null, got {tamper_penalty!r}")
        if harness not in HARNESS_MODES:
            raise ValueError(f"unknown harness mode {harness!r}; choose one of {HARNESS_MODES}")
        self.harness = harness
        self.tamper_penalty = tamper_penalty
        self.extract = extract
        self.partial_credit = partial_credit
        self.timeout = timeout
        self.case_timeout = case_timeout
        self.memory_mb = memory_mb
        self.isolation = isolation
        self.include_challenge_tests = include_challenge_tests

    def prepare(self, completion: str, reference: Any, fields: Mapping[str, Any]) -> tuple[str, Tests] | VerifierResult:
        """(program, tests), or the unscorable result explaining why there are none."""
        row = dict(reference) if isinstance(reference, Mapping) else {}
        row.update(fields)
        code = extract_code(completion, self.extract)
        if code is None or not code.strip():
            return VerifierResult.unscorable("no code found in the completion", extract=self.extract)
        try:
            program, tests = build(code, row, include_challenge_tests=self.include_challenge_tests,
                                   case_timeout=self.case_timeout)
        except (MissingFieldError, ValueError) as exc:
            return VerifierResult.unscorable(str(exc))
        return exec_tests(program, tests, self.timeout) if self.harness == "exec" else (program, tests)

    def score(self, result: ExecutionResult) -> VerifierResult:
        info = {"status": result.status, "passed": result.passed, "total": result.total,
                "duration": round(result.duration, 4), "isolation": result.isolation}
        if self.harness != "trusted":
            info["harness"] = self.harness
        if result.harness_error:
            return VerifierResult.unscorable(f"the tests could not run: {result.harness_error}", **info)
        if result.detail:
            info["detail"] = result.detail
        if result.tamper:
            info["tamper"] = list(result.tamper)
            if self.tamper_penalty is not None:  # the attempt itself is punished, whatever the tests said
                return VerifierResult.ok(float(self.tamper_penalty), **info, tamper_penalised=True)
        if self.partial_credit:
            return VerifierResult.ok(result.fraction, **info)
        return VerifierResult.ok(1.0 if result.status == "passed" else 0.0, **info)

    def __call__(self, completion: str, reference: Any = None, **fields: Any) -> VerifierResult:
        prepared = self.prepare(completion, reference, fields)
        if isinstance(prepared, VerifierResult):
            return prepared
        program, tests = prepared
        try:
            result = run_tests(program, self.timeout, tests=tests, limits=Limits(memory_mb=self.memory_mb),
                               isolation=self.isolation)
        except SandboxError as exc:
            return VerifierResult.error(str(exc))
        return self.score(result)

    def batch(self, completions: Sequence[str], references: Sequence[Any],
              fields: Sequence[Mapping[str, Any]] | None = None) -> list[VerifierResult]:
        """Score many completions with this process's sandbox pool (one worker per core)."""
        fields = fields if fields is not None else [{}] * len(completions)
        prepared = [self.prepare(c, r, f) for c, r, f in zip(completions, references, fields)]
        runnable = [p for p in prepared if not isinstance(p, VerifierResult)]
        try:
            results = iter(run_tests_batch([p[0] for p in runnable], [p[1] for p in runnable], self.timeout,
                                           limits=Limits(memory_mb=self.memory_mb), isolation=self.isolation)
                           if runnable else [])
        except SandboxError as exc:
            return [p if isinstance(p, VerifierResult) else VerifierResult.error(str(exc)) for p in prepared]
        return [p if isinstance(p, VerifierResult) else self.score(next(results)) for p in prepared]

    def __repr__(self) -> str:
        return (f"CodeVerifier(extract={self.extract!r}, partial_credit={self.partial_credit}, "
                f"timeout={self.timeout}, isolation={self.isolation!r}, harness={self.harness!r})")
