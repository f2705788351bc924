"""The reward-layer contract: what a verifier returns.

A verifier scores ONE completion against ONE reference (plus any dataset fields it
needs) and returns a :class:`VerifierResult`:

* ``score``  -- ``float`` in the verifier's own range, or ``None`` when the sample
  cannot be scored (the gold answer is unparsable, a required field is missing, the
  checker timed out). ``None`` is never silently turned into 0: training leaves such
  samples out of their group's statistics, evaluation reports them separately.
* ``status`` -- one of ``ok``, ``unscorable``, ``timeout``, ``error``.
* ``info``   -- free-form details for logs (extracted answer, error message, ...).

Only ``status == "ok"`` carries a float score; the constructors below keep the two
consistent so a caller never has to guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Status = Literal["ok", "unscorable", "timeout", "error"]
STATUSES: tuple[Status, ...] = ("ok", "unscorable", "timeout", "error")


@dataclass(frozen=True)
class VerifierResult:
    """Outcome of scoring one completion. Build it with :meth:`ok`, :meth:`unscorable`,
    :meth:`timeout` or :meth:`error` rather than by hand."""

    score: float | None
    status: Status = "ok"
    info: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verifier status {self.status!r}; expected one of {STATUSES}")
        if self.status == "ok" and self.score is None:
            raise ValueError("a result with status 'ok' needs a float score; use VerifierResult.unscorable()")
        if self.status != "ok" and self.score is not None:
            raise ValueError(f"a result with status {self.status!r} must have score=None, got {self.score!r}")

    @classmethod
    def ok(cls, score: float, **info: Any) -> VerifierResult:
        return cls(float(score), "ok", info)

    @classmethod
    def unscorable(cls, reason: str, **info: Any) -> VerifierResult:
        return cls(None, "unscorable", {"reason": reason, **info})

    @classmethod
    def timeout(cls, seconds: float, **info: Any) -> VerifierResult:
        return cls(None, "timeout", {"reason": f"no result within {seconds:g}s; the item was killed", **info})

    @classmethod
    def error(cls, message: str, **info: Any) -> VerifierResult:
        return cls(None, "error", {"reason": message, **info})

    @property
    def scored(self) -> bool:
        return self.status == "ok"


@runtime_checkable
class Verifier(Protocol):
    """Anything callable as ``verifier(completion, reference, **fields) -> VerifierResult``.

    Verifiers must be picklable (module-level functions or classes with picklable
    attributes): batch scoring sends them to worker processes.
    """

    def __call__(self, completion: str, reference: Any, **fields: Any) -> VerifierResult: ...


def as_result(value: Any) -> VerifierResult:
    """Normalise what a user verifier returned: a ``VerifierResult`` passes through,
    a number becomes ``ok``, ``None`` becomes ``unscorable``, a bool becomes 1.0/0.0."""
    if isinstance(value, VerifierResult):
        return value
    if value is None:
        return VerifierResult.unscorable("the verifier returned None")
    if isinstance(value, (bool, int, float)):
        return VerifierResult.ok(float(value))
    raise TypeError(
        f"a verifier must return a VerifierResult, a number or None; got {type(value).__name__}: {value!r}"
    )
