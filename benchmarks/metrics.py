"""Benchmark metrics: accuracy, unbiased pass@k, maj@k, and their standard errors.

Every function here is pure: it takes per-problem verdicts (lists of numbers or
booleans) and returns numbers. The evaluation loop (:mod:`benchmarks.evaluate`)
decides which samples go in; nothing here knows about models or files.

Notation, for one problem: ``n`` samples were drawn, ``c`` of them are correct.
A benchmark score is the mean of a per-problem score over the ``N`` problems, and
its standard error is ``sqrt(var / N)`` with the sample variance (``ddof=1``) of
the per-problem scores -- the error of the mean over problems, which is what
separates two checkpoints on the same benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem (Chen et al. 2021, arXiv 2107.03374, eq. 1).

    ``pass@k = 1 - C(n - c, k) / C(n, k)``: the probability that at least one of
    ``k`` samples drawn without replacement from the ``n`` generated ones is
    correct. The ratio of binomials is computed as the stable product
    ``C(n-c, k) / C(n, k) = prod_{i = n-c+1}^{n} (1 - k / i)``, which never forms
    the huge binomials themselves.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least k={k} samples per problem, got n={n}")
    if n - c < k:  # every draw of k samples contains a correct one
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_vote(
    answers: Sequence[Hashable | None],
    equivalent: Callable[[Hashable, Hashable], bool] | None = None,
) -> int | None:
    """Index of the representative sample of the most common answer, or ``None``.

    Samples whose answer is ``None`` (nothing could be extracted) do not vote.
    Answers are first grouped by equality of their normalised form; when
    ``equivalent(a, b)`` is given, groups whose representatives it calls equal are
    merged (e.g. ``0.5`` and ``\\frac{1}{2}``). Ties go to the group whose first
    member came first, so the vote is deterministic.
    """
    groups: list[list[int]] = []  # sample indices, in order of first appearance
    by_key: dict[Hashable, int] = {}
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        if answer in by_key:
            groups[by_key[answer]].append(i)
            continue
        match = None
        if equivalent is not None:
            match = next((g for g, members in enumerate(groups) if equivalent(answers[members[0]], answer)), None)
        if match is None:
            match = len(groups)
            groups.append([])
        by_key[answer] = match
        groups[match].append(i)
    if not groups:
        return None
    best = max(range(len(groups)), key=lambda g: (len(groups[g]), -groups[g][0]))
    return groups[best][0]


def reports_answers(info: Mapping[str, Any] | None) -> bool:
    """True when a verifier result's ``info`` has an answer field (``extracted``, ``pred``, ...; see
    :data:`reasoning_rl.tasks.scoring.ANSWER_KEYS`), even an empty one: the verifier reports what it
    extracted, so a sample without an answer found nothing."""
    from reasoning_rl.tasks.scoring import ANSWER_KEYS

    return any(key in (info or {}) for key in ANSWER_KEYS)


def vote_answer(extracted: str | None, completion: str, *, scored: bool, reports_answers: bool) -> str | None:
    """What one sample votes for in maj@k.

    * the verifier's extracted answer, when it reported one;
    * nothing (``None``) when the verifier reports answers (its result has an answer field) but
      found none in this sample, or could not score it (unscorable, timeout, error);
    * the completion itself with its whitespace collapsed, when the verifier scored it (status
      ``ok``) but reports no answer field at all (a plugin returning ``VerifierResult.ok(score)``
      alone): identical answers still agree, instead of every sample voting for "no answer".
    """
    if extracted is not None:
        return extracted
    if scored and not reports_answers:
        return " ".join(completion.split())
    return None


def maj_at_k(
    answers: Sequence[Hashable | None],
    correct: Sequence[float],
    k: int,
    equivalent: Callable[[Hashable, Hashable], bool] | None = None,
) -> float:
    """maj@k of one problem: the score of the majority answer among the first ``k`` samples.

    ``maj@k = correct[j]`` where ``j = majority_vote(answers[:k])``, and 0 when no
    sample of the first ``k`` has an extractable answer. Uses the first ``k``
    samples (not an average over subsets), as in Wang et al. 2022 (self-consistency).
    """
    if len(answers) != len(correct):
        raise ValueError(f"got {len(answers)} answers but {len(correct)} verdicts")
    if not 1 <= k <= len(answers):
        raise ValueError(f"maj@{k} needs at least k={k} samples per problem, got {len(answers)}")
    winner = majority_vote(answers[:k], equivalent)
    return 0.0 if winner is None else float(correct[winner])
