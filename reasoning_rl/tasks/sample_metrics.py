"""Per-problem scores of n sampled completions: unbiased pass@k, the majority vote and maj@k.

They belong with the scoring of a task (:mod:`reasoning_rl.tasks.scoring` grades one sample;
this module turns a problem's n graded samples into pass@k / maj@k), so that training
(held-out evaluation, ``reasoning_rl.evaluation.heldout``) and the benchmark harness
(``benchmarks.metrics``, ``benchmarks.evaluate``) use the same functions and neither imports
the other. Every function is pure: verdicts and answers in, numbers out.

Notation, for one problem: ``n`` samples were drawn, ``c`` of them are correct.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from reasoning_rl.tasks.scoring import ANSWER_KEYS

__all__ = ["maj_at_k", "majority_vote", "pass_at_k", "reports_answers", "vote_answer"]


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
