"""Held-out accuracy of a policy on a task: greedy and sampled, with the task's own verifier,
and Pass@K / Maj@K from the sampled completions.

Scored by :func:`reasoning_rl.tasks.scoring.grade` with the reward's first component (the
dataset definition's verifier), the function and correctness rule the benchmark harness
uses, so held-out accuracy here and ``reasoning-rl-eval`` on the same split agree. Pass@K is
the unbiased estimator of :func:`reasoning_rl.tasks.sample_metrics.pass_at_k`; Maj@K the majority
vote of :func:`reasoning_rl.tasks.sample_metrics.maj_at_k` over K samples, averaged over several
random orders of the n samples (an estimate of the expected vote of K random samples, less noisy
than the first K alone). A sample votes for the answer its verifier extracted, or, when the
verifier scored it with no answer field at all (a plugin returning ``VerifierResult.ok(score)``
alone), for its whitespace-normalised completion (``sample_metrics.vote_answer``); an unscorable
sample does not vote. ``reasoning-rl-eval`` additionally merges answers the verifier calls equal
(``0.5`` and ``\\frac12``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from reasoning_rl.reward_guard import RewardGuard, not_scored
from reasoning_rl.rollouts.sampling import RolloutEngine, SamplingConfig
from reasoning_rl.tasks import Example
from reasoning_rl.tasks.sample_metrics import maj_at_k, pass_at_k, reports_answers, vote_answer
from reasoning_rl.tasks.scoring import Graded, extracted_answer, grade, is_correct
from rewards.compose import CompositeReward
from rewards.pool import WorkerPool

__all__ = ["HeldOutResult", "accuracy_of", "evaluate_heldout", "is_correct", "k_values", "pass_and_maj_at_k"]

log = logging.getLogger(__name__)

MAJ_ORDERS = 64
"""Random orders of the n samples that Maj@K is averaged over."""


@dataclass
class HeldOutResult:
    greedy_accuracy: float
    sampled_accuracy: float
    num_problems: int
    samples_per_problem: int
    pass_at: dict[int, float] = field(default_factory=dict)
    """Pass@K for K in :func:`k_values` of the sampled completions."""
    maj_at: dict[int, float] = field(default_factory=dict)
    """Maj@K for the same K."""
    not_scored: dict[str, dict[str, int]] = field(default_factory=dict)
    """Samples the verifier left without a score, by status, of the ``greedy`` and ``sampled`` runs
    (non-zero counts only): ``{"greedy": {"error": 3}}``. Each counts as not correct."""

    def as_dict(self) -> dict[str, float]:
        return {"greedy_accuracy": self.greedy_accuracy, "sampled_accuracy": self.sampled_accuracy,
                "num_problems": self.num_problems, "samples_per_problem": self.samples_per_problem,
                **{f"pass@{k}": v for k, v in self.pass_at.items()},
                **{f"maj@{k}": v for k, v in self.maj_at.items()},
                **{f"not_scored/{run}/{status}": n for run, counts in self.not_scored.items()
                   for status, n in counts.items()}}


def k_values(n: int) -> list[int]:
    """The K of Pass@K and Maj@K reported for n samples a problem: 1, 2, 4, ... up to n, and n."""
    ks = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
    return ks + ([n] if n not in ks else [])


def pass_and_maj_at_k(correct: Sequence[Sequence[bool]], answers: Sequence[Sequence[str | None]],
                      seed: int = 0, orders: int = MAJ_ORDERS) -> tuple[dict[int, float], dict[int, float]]:
    """Pass@K and Maj@K, means over problems, from each problem's n verdicts and extracted answers.

    Pass@K = mean_i [1 - C(n - c_i, K) / C(n, K)]; Maj@K = mean_i mean over ``orders`` seeded random
    orders of the majority answer's verdict among the order's first K samples (Maj@1 = Pass@1)."""
    if not correct:
        return {}, {}
    n = min(len(c) for c in correct)
    rng = random.Random(seed)
    pass_at, maj_at = {}, {}
    for k in k_values(n):
        pass_at[k] = sum(pass_at_k(len(c), sum(c), k) for c in correct) / len(correct)
        if k == 1:  # the vote of one sample is that sample: Maj@1 = Pass@1 exactly
            maj_at[k] = pass_at[k]
            continue
        votes = []
        for c, a in zip(correct, answers):
            per_order = []
            for _ in range(orders):
                order = rng.sample(range(len(c)), len(c))
                per_order.append(maj_at_k([a[j] for j in order], [float(c[j]) for j in order], k))
            votes.append(sum(per_order) / orders)
        maj_at[k] = sum(votes) / len(votes)
    return pass_at, maj_at


def _graded(engine: RolloutEngine, examples: Sequence[Example], reward: CompositeReward, sampling: SamplingConfig,
            n: int, seed: int, timeout: float, pool: WorkerPool | None, guard: RewardGuard | None = None,
            phase: str = "held-out evaluation") -> tuple[Graded, list[str]]:
    """``n`` completions per example (flat, example-major), graded by the FIRST reward component
    (the accuracy verifier); ``guard`` (when given) stops the run when that verifier failed on too many."""
    groups = engine.generate([e.prompt for e in examples], n, sampling, seed=seed)
    texts = [c.text for g in groups for c in g]
    refs = [e.reference for e in examples for _ in range(n)]
    fields = [e.fields for e in examples for _ in range(n)]
    key = reward.specs[0].key
    graded = grade(reward.verifiers[key], texts, refs, fields, timeout=timeout, pool=pool)
    if guard is not None:
        guard.observe(phase, {key: graded.batch})
    return graded, texts


def accuracy_of(engine: RolloutEngine, examples: Sequence[Example], reward: CompositeReward,
                sampling: SamplingConfig, n: int, seed: int, timeout: float, pool: WorkerPool | None,
                guard: RewardGuard | None = None, phase: str = "held-out evaluation") -> float:
    """Mean correctness (by the FIRST reward component, the accuracy verifier) over ``n`` completions per example."""
    graded, _ = _graded(engine, examples, reward, sampling, n, seed, timeout, pool, guard, phase)
    return sum(graded.correct) / max(1, len(graded.correct))


def evaluate_heldout(engine: RolloutEngine, examples: Sequence[Example], reward: CompositeReward,
                     sampling: SamplingConfig, samples_per_problem: int, seed: int, timeout: float = 10.0,
                     pool: WorkerPool | None = None, guard: RewardGuard | None = None) -> HeldOutResult:
    """Greedy accuracy (1 completion per problem); sampled accuracy (``samples_per_problem``
    completions at the training temperature; the mean is pass@1 estimated from n samples), and
    Pass@K / Maj@K from the same samples. Samples the verifier could not score count as not
    correct and are counted in ``not_scored``; ``guard`` stops the run when most are."""
    greedy = SamplingConfig(max_new_tokens=sampling.max_new_tokens, do_sample=False, stop=sampling.stop)
    n = samples_per_problem
    graded, texts = _graded(engine, examples, reward, sampling, n, seed, timeout, pool, guard)
    correct = [graded.correct[i * n:(i + 1) * n] for i in range(len(examples))]
    extracted = [extracted_answer(r.info) for r in graded.batch.results]
    votes = [vote_answer(a, text, scored=r.status == "ok", reports_answers=reports_answers(r.info))
             for a, r, text in zip(extracted, graded.batch.results, texts)]
    answers = [votes[i * n:(i + 1) * n] for i in range(len(examples))]
    by_text = sum(1 for a, v in zip(extracted, votes) if v is not None and a is None)
    if by_text:
        log.info("held-out Maj@K: %d of %d scored samples vote by their completion text: the verifier reported "
                 "no extracted answer for them", by_text, len(texts))
    pass_at, maj_at = pass_and_maj_at_k(correct, answers, seed=seed)
    greedy_graded, _ = _graded(engine, examples, reward, greedy, 1, seed, timeout, pool, guard)
    return HeldOutResult(
        greedy_accuracy=sum(greedy_graded.correct) / max(1, len(greedy_graded.correct)),
        sampled_accuracy=sum(graded.correct) / max(1, len(graded.correct)),
        num_problems=len(examples),
        samples_per_problem=n,
        pass_at=pass_at,
        maj_at=maj_at,
        not_scored={run: counts for run, g in (("greedy", greedy_graded), ("sampled", graded))
                    if (counts := not_scored(g.batch))},
    )
