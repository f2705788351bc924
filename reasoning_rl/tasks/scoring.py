"""Correctness of completions, decided once for training and evaluation.

Held-out evaluation during training (:mod:`reasoning_rl.evaluation.heldout`) and the benchmark
harness (:mod:`benchmarks.evaluate`) both call :func:`grade` with the verifier a
dataset definition names, and both count a sample as correct by :func:`is_correct`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewards.batch import BatchScores, score_batch
from rewards.pool import WorkerPool

CORRECT_AT = 1.0 - 1e-9
"""A sample is correct when the verifier scored it ``ok`` with score >= 1 (up to float rounding)."""


def is_correct(score: float | None, status: str = "ok") -> bool:
    """True when the verifier gave its full score (1.0) with status ``ok``; ``None`` (unscorable,
    timeout, error) is never correct."""
    return status == "ok" and score is not None and score >= CORRECT_AT


ANSWER_KEYS = ("pred", "extracted", "answer", "prediction")
"""``info`` keys a verifier may use for the answer it extracted (majority voting reads them)."""


def extracted_answer(info: Mapping[str, Any] | None) -> str | None:
    """The answer a verifier extracted from a completion (its ``info``), stripped; None when there is none."""
    info = info or {}
    for key in ANSWER_KEYS:
        if info.get(key) not in (None, ""):
            return str(info[key]).strip()
    return None


@dataclass(frozen=True)
class Graded:
    """The verifier's results, in input order, and whether each sample is correct."""

    batch: BatchScores
    correct: list[bool]


def grade(verifier: Callable[..., Any], completions: Sequence[str], references: Sequence[Any],
          fields: Sequence[Mapping[str, Any]] | None = None, *, timeout: float,
          pool: WorkerPool | None = None) -> Graded:
    """Score ``completions[i]`` against ``references[i]`` in worker processes with a hard time
    limit (:func:`rewards.score_batch`) and mark each correct or not."""
    batch = score_batch(verifier, completions, references, fields, timeout=timeout, pool=pool)
    return Graded(batch=batch, correct=[is_correct(r.score, r.status) for r in batch.results])
