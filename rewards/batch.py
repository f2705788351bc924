"""Score a batch of completions in parallel worker processes, with a hard time limit per item."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewards.pool import CallOutcome, WorkerPool, default_pool
from rewards.types import VerifierResult, as_result


@dataclass(frozen=True)
class BatchScores:
    """One :class:`VerifierResult` per item, in input order, plus failure counts for logging."""

    results: list[VerifierResult]
    num_timeouts: int
    num_errors: int
    num_unscorable: int
    seconds: float
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def scores(self) -> list[float | None]:
        return [r.score for r in self.results]

    def __len__(self) -> int:
        return len(self.results)


def _score_one(verifier: Callable[..., Any], completion: str, reference: Any, fields: Mapping[str, Any]) -> Any:
    """Runs inside a worker: call the verifier and normalise what it returned."""
    return as_result(verifier(completion, reference, **fields))


def score_batch(
    verifier: Callable[..., Any],
    completions: Sequence[str],
    references: Sequence[Any],
    fields: Sequence[Mapping[str, Any]] | None = None,
    *,
    timeout: float = 10.0,
    pool: WorkerPool | None = None,
) -> BatchScores:
    """Score ``completions[i]`` against ``references[i]`` (and ``fields[i]``) for every ``i``.

    Each item runs in a worker process of ``pool`` (default: one worker per core,
    shared by the whole process) and is killed after ``timeout`` seconds of wall
    clock; it is then reported with status ``timeout``. A verifier that raises or
    crashes its worker gives status ``error`` with the reason in ``info``. The batch
    always returns one result per item, in order.
    """
    if len(completions) != len(references):
        raise ValueError(f"got {len(completions)} completions but {len(references)} references")
    if fields is not None and len(fields) != len(completions):
        raise ValueError(f"got {len(completions)} completions but {len(fields)} field mappings")
    field_list = [dict(f) for f in fields] if fields is not None else [{} for _ in completions]
    start = time.perf_counter()
    outcomes = (pool or default_pool()).map(
        # The verifier is bound once (sent to each worker once), items carry only data.
        functools.partial(_score_one, verifier),
        [(c, r, f) for c, r, f in zip(completions, references, field_list)],
        timeout,
    )
    results = [_to_result(o, timeout) for o in outcomes]
    counts = {status: sum(r.status == status for r in results) for status in ("ok", "unscorable", "timeout", "error")}
    return BatchScores(
        results=results,
        num_timeouts=counts["timeout"],
        num_errors=counts["error"],
        num_unscorable=counts["unscorable"],
        seconds=time.perf_counter() - start,
        counts=counts,
    )


def _to_result(outcome: CallOutcome, timeout: float) -> VerifierResult:
    if outcome.status == "ok":
        return outcome.value
    if outcome.status == "timeout":
        return VerifierResult.timeout(timeout)
    return VerifierResult.error(outcome.message.strip().splitlines()[-1] if outcome.message else "error",
                                traceback=outcome.message)
