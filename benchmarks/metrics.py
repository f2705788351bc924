"""Benchmark metrics: accuracy, unbiased pass@k, maj@k, and their standard errors.

Every function here is pure: it takes per-problem verdicts (lists of numbers or
booleans) and returns numbers. The evaluation loop (:mod:`benchmarks.evaluate`)
decides which samples go in; nothing here knows about models or files.

Notation, for one problem: ``n`` samples were drawn, ``c`` of them are correct.
A benchmark score is the mean of a per-problem score over the ``N`` problems, and
its standard error is ``sqrt(var / N)`` with the sample variance (``ddof=1``) of
the per-problem scores -- the error of the mean over problems, which is what
separates two checkpoints on the same benchmark.

The per-problem scores of n samples (unbiased pass@k, the majority vote, maj@k) are defined
with the scoring of a task, in :mod:`reasoning_rl.tasks.sample_metrics`, and imported here:
training's held-out evaluation uses the same functions without importing the harness.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reasoning_rl.tasks.sample_metrics import maj_at_k, majority_vote, pass_at_k, reports_answers, vote_answer

__all__ = ["MetricValue", "accuracy", "maj_at_k", "majority_vote", "mean_and_stderr", "pass_at_k",
           "reports_answers", "vote_answer"]


@dataclass(frozen=True)
class MetricValue:
    """A benchmark-level metric: the mean over problems, its standard error, and N."""

    value: float
    stderr: float
    num_problems: int

    def as_dict(self) -> dict[str, float | int]:
        return {"value": self.value, "stderr": self.stderr, "num_problems": self.num_problems}


def mean_and_stderr(per_problem: Sequence[float]) -> MetricValue:
    """``mean = sum(x_i) / N`` and ``stderr = sqrt(sum((x_i - mean)^2) / (N - 1) / N)``.

    With a single problem the standard error is undefined and reported as ``nan``.
    """
    values = np.asarray(per_problem, dtype=np.float64)
    n = len(values)
    if n == 0:
        return MetricValue(float("nan"), float("nan"), 0)
    mean = float(values.mean())
    stderr = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return MetricValue(mean, stderr, n)


def accuracy(scores: Sequence[float]) -> float:
    """Per-problem accuracy (pass@1 estimated from all ``n`` samples): ``c / n``.

    ``scores`` are the verifier scores of the problem's samples, 1.0 for correct; a
    fractional score (partial credit) counts as its value.
    """
    if not scores:
        raise ValueError("accuracy of a problem with no samples is undefined")
    return float(sum(scores)) / len(scores)


def format_metric(m: dict[str, Any]) -> str:
    """``"45.20 ± 2.23"`` (percent, standard error) for a metric dict."""
    if m["num_problems"] == 0 or math.isnan(m["value"]):
        return "n/a"
    err = "" if math.isnan(m["stderr"]) else f" ± {100 * m['stderr']:.2f}"
    return f"{100 * m['value']:.2f}{err}"
