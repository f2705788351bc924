"""The typed results and limits of the sandbox (host side)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .inside.clock import WALL_CLOCK_FACTOR, WALL_CLOCK_SLACK_S

ExecStatus = Literal["passed", "failed", "timeout", "error"]


@dataclass(frozen=True)
class Limits:
    """Resource limits of ONE candidate process (each stdin/stdout case gets its own)."""

    memory_mb: int = 1024
    """RLIMIT_AS (address space) in MiB; an allocation beyond it raises MemoryError."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE in MiB: the largest file (stdout and stderr included) C may write."""
    max_processes: int = 32
    """RLIMIT_NPROC: processes + threads of C's uid (enforced when the host runs as root)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    output_tail_bytes: int = 2000
    """How much of the end of stdout/stderr is kept in the result."""
    max_output_bytes: int = 8 << 20
    """stdin/stdout tests: at most this much of a case's stdout is compared."""
    wall_clock_factor: float = WALL_CLOCK_FACTOR
    """The time limit is CPU time (RLIMIT_CPU); the wall-clock backstop for a program that sleeps
    or blocks is ``timeout * wall_clock_factor + wall_clock_slack_s`` (inside/clock.py)."""
    wall_clock_slack_s: float = WALL_CLOCK_SLACK_S
    """Seconds added to the wall-clock backstop (process start, a loaded machine)."""


@dataclass(frozen=True)
class ExecutionResult:
    """What running one program against its tests gave.

    ``status``: ``passed`` (every test passed), ``failed`` (the program ran, a test failed),
    ``timeout`` (the wall-clock deadline passed), ``error`` (the program could not be loaded
    or its process died: syntax error, exception at import, memory limit, killed itself).
    ``harness_error`` is set when the TESTS could not run (bad dataset row): the program is
    then not to blame and the verifier reports the sample as unscorable.
    ``tamper``: the kinds of attempts to game the tests the program made (functional tests;
    :mod:`.inside.tamper`), sorted; empty for an honest program.
    """

    status: ExecStatus
    passed: int
    total: int
    duration: float
    stdout: str = ""
    stderr: str = ""
    detail: str = ""
    isolation: str = ""
    harness_error: str | None = None
    cases: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    tamper: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class SandboxError(RuntimeError):
    """The sandbox itself could not start or broke (not the program's fault)."""
