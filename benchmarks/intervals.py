"""95% bootstrap intervals of a benchmark score, of a suite average, and of a paired difference.

A benchmark's verdicts are a matrix ``correct[i, j]``: problem ``i`` (of ``N``), sample ``j`` (of ``n``).
Its score is ``avg@n = mean_i mean_j correct[i, j]`` (greedy: ``n = 1``, plain accuracy).

* **Score interval** (two-level bootstrap, problems then samples): a replicate draws ``N`` problems
  with replacement and, for each drawn problem, ``n`` of its samples with replacement, and takes
  ``avg@n`` of that draw. Resampling the samples too is what makes an ``avg@16`` interval on AIME's
  30 problems honest about the sampling noise of 16 draws, not only the choice of problems.
* **Percentile interval**: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the replicates
  (numpy's linear interpolation).
* **Suite average**: replicate ``b`` of the average is the mean over benchmarks of each benchmark's
  replicate ``b`` (benchmarks resampled independently).
* **Paired difference** of B - A evaluated on the same problems with the same sample seeds: sample ``j``
  of A and of B share a seed, so a replicate draws problem and sample indices once and applies them to
  ``d = correct_B - correct_A``. Pairing removes the problem-difficulty variance both models share; the
  interval is far narrower than the one of two independent scores. A difference whose interval
  excludes 0 is marked significant.

Efron & Tibshirani, *An Introduction to the Bootstrap* (1993), ch. 13 (percentile interval). Draws are
seeded (``seed``), so a table is the same every time it is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

REPLICATES = 1000
CHUNK = 100  # replicates drawn at once: bounds the index arrays to CHUNK * N * n integers


@dataclass(frozen=True)
class Interval:
    """A score (or difference) with its percentile bootstrap interval, all as fractions."""

    value: float
    low: float
    high: float
    level: float = 0.95

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def as_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high, "level": self.level}


def as_matrix(correct: Sequence[Sequence[bool | float]]) -> np.ndarray:
    """Per-problem verdict lists -> ``[N, n]`` float matrix. Problems with different sample counts
    (a samples file may give some problems more) keep their per-problem mean as a single column."""
    if len({len(c) for c in correct}) <= 1:
        return np.asarray(correct, dtype=float).reshape(len(correct), -1)
    return np.asarray([[sum(c) / len(c)] for c in correct], dtype=float)


def replicate_means(values: np.ndarray, problem_idx: np.ndarray, sample_idx: np.ndarray | None) -> np.ndarray:
    """``avg@n`` of each replicate: ``mean_i mean_j values[problem_idx[b, i], sample_idx[b, i, j]]``.

    ``values`` ``[N, n]``; ``problem_idx`` ``[B, N]``; ``sample_idx`` ``[B, N, n]`` or None (every sample
    of a drawn problem kept: ``n = 1``, or the problem-level bootstrap). Returns ``[B]``."""
    if sample_idx is None:
        return values[problem_idx].mean(axis=(1, 2))  # [B, N, n] -> [B]
    return values[problem_idx[..., None], sample_idx].mean(axis=(1, 2))  # [B, N, n] -> [B]


def draw_replicates(values: np.ndarray, replicates: int = REPLICATES, seed: int = 0) -> np.ndarray:
    """``[B]`` bootstrap replicates of ``avg@n`` of ``values`` ``[N, n]`` (problems, then samples)."""
    rng = np.random.default_rng(seed)
    num_problems, n = values.shape
    out = []
    for start in range(0, replicates, CHUNK):
        b = min(CHUNK, replicates - start)
        problem_idx = rng.integers(0, num_problems, size=(b, num_problems))  # [b, N]
        sample_idx = rng.integers(0, n, size=(b, num_problems, n)) if n > 1 else None  # [b, N, n]
        out.append(replicate_means(values, problem_idx, sample_idx))
    return np.concatenate(out) if out else np.zeros(0)


def percentile_interval(value: float, replicates: np.ndarray, level: float = 0.95) -> Interval:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``replicates`` around ``value``."""
    if len(replicates) == 0:
        return Interval(value, value, value, level)
    low, high = np.percentile(replicates, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(value), float(low), float(high), level)


def score_interval(correct: Sequence[Sequence[bool | float]], replicates: int = REPLICATES, seed: int = 0,
                   level: float = 0.95) -> tuple[Interval, np.ndarray]:
    """``avg@n`` of one benchmark with its interval, and the replicates (for a suite average)."""
    values = as_matrix(correct)
    reps = draw_replicates(values, replicates, seed)
    return percentile_interval(float(values.mean()) if values.size else float("nan"), reps, level), reps


def average_interval(values: Sequence[float], replicates: Sequence[np.ndarray], level: float = 0.95) -> Interval:
    """The unweighted mean of several benchmarks' scores, its replicates the mean of theirs."""
    return percentile_interval(float(np.mean(values)), np.mean(np.stack(replicates), axis=0), level)


def paired_difference(correct_a: Sequence[Sequence[bool | float]], correct_b: Sequence[Sequence[bool | float]],
                      replicates: int = REPLICATES, seed: int = 0, level: float = 0.95) -> tuple[Interval, np.ndarray]:
    """``avg@n(B) - avg@n(A)`` on the same problems (same order) and sample seeds, with the paired
    bootstrap interval (one draw of problem and sample indices applied to both), and the replicates."""
    a, b = as_matrix(correct_a), as_matrix(correct_b)
    if a.shape != b.shape:  # different n: pair at the problem level only
        a, b = a.mean(axis=1, keepdims=True), b.mean(axis=1, keepdims=True)
    diff = b - a  # [N, n]
    reps = draw_replicates(diff, replicates, seed)
    return percentile_interval(float(diff.mean()), reps, level), reps
