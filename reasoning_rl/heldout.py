"""Held-out accuracy of a policy on a task: greedy and sampled, with the task's own verifier.

Scored by :func:`reasoning_rl.tasks.scoring.grade` with the reward's first component (the
dataset definition's verifier), the function and correctness rule the benchmark harness
uses, so held-out accuracy here and ``reasoning-rl-eval`` on the same split agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reasoning_rl.rollout import RolloutEngine, SamplingConfig
from reasoning_rl.tasks import Example
from reasoning_rl.tasks.scoring import grade, is_correct
from rewards.compose import CompositeReward
from rewards.pool import WorkerPool

__all__ = ["HeldOutResult", "accuracy_of", "evaluate_heldout", "is_correct"]


@dataclass
class HeldOutResult:
    greedy_accuracy: float
    sampled_accuracy: float
    num_problems: int
    samples_per_problem: int

    def as_dict(self) -> dict[str, float]:
        return {"greedy_accuracy": self.greedy_accuracy, "sampled_accuracy": self.sampled_accuracy,
                "num_problems": self.num_problems, "samples_per_problem": self.samples_per_problem}


def accuracy_of(engine: RolloutEngine, examples: Sequence[Example], reward: CompositeReward,
                sampling: SamplingConfig, n: int, seed: int, timeout: float, pool: WorkerPool | None) -> float:
    """Mean correctness (by the FIRST reward component, the accuracy verifier) over ``n`` completions per example."""
    groups = engine.generate([e.prompt for e in examples], n, sampling, seed=seed)
    texts = [c.text for g in groups for c in g]
    refs = [e.reference for e in examples for _ in range(n)]
    fields = [e.fields for e in examples for _ in range(n)]
    verifier = reward.verifiers[reward.specs[0].key]
    graded = grade(verifier, texts, refs, fields, timeout=timeout, pool=pool)
    return sum(graded.correct) / max(1, len(texts))


def evaluate_heldout(engine: RolloutEngine, examples: Sequence[Example], reward: CompositeReward,
                     sampling: SamplingConfig, samples_per_problem: int, seed: int, timeout: float = 10.0,
                     pool: WorkerPool | None = None) -> HeldOutResult:
    """Greedy accuracy (1 completion per problem) and sampled accuracy (``samples_per_problem``
    completions at the training temperature; the mean is pass@1 estimated from n samples)."""
    greedy = SamplingConfig(max_new_tokens=sampling.max_new_tokens, do_sample=False, stop=sampling.stop)
    return HeldOutResult(
        greedy_accuracy=accuracy_of(engine, examples, reward, greedy, 1, seed, timeout, pool),
        sampled_accuracy=accuracy_of(engine, examples, reward, sampling, samples_per_problem, seed, timeout, pool),
        num_problems=len(examples),
        samples_per_problem=samples_per_problem,
    )
