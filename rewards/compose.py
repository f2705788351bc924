"""Combine several reward functions, with weights, into one scalar per completion.

``reward = sum_k w_k * score_k``

How ``None`` (a component that could not score the sample) combines is a policy,
chosen explicitly:

* ``"propagate"`` (default): if ANY component is ``None`` the combined reward is
  ``None``; training then leaves the sample out of its group's statistics (zero
  advantage). This is the safe choice when the main reward (correctness) is the
  one that failed: a format bonus alone must not stand in for it.
* ``"skip"``: components that are ``None`` contribute nothing; the sum runs over
  the components that scored. The combined reward is ``None`` only when every
  component is ``None``. Weights are NOT renormalised (renormalising would make
  a format-only score worth as much as a correct answer).
* ``"zero"``: ``None`` counts as 0.0 (what TRL and verl do implicitly). Offered
  for comparison with them; it conflates "wrong" with "could not tell".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rewards.batch import BatchScores, score_batch
from rewards.pool import WorkerPool
from rewards.registry import get_verifier
from rewards.specs import RewardSpec

NonePolicy = Literal["propagate", "skip", "zero"]
NONE_POLICIES: tuple[str, ...] = ("propagate", "skip", "zero")


def combine_scores(scores: Sequence[float | None], weights: Sequence[float], none_policy: NonePolicy = "propagate") -> float | None:
    """Weighted sum ``sum_k w_k * s_k`` of one completion's component scores, with the
    ``None`` handling described in the module docstring."""
    if len(scores) != len(weights):
        raise ValueError(f"got {len(scores)} scores but {len(weights)} weights")
    if none_policy not in NONE_POLICIES:
        raise ValueError(f"unknown none_policy {none_policy!r}; expected one of {NONE_POLICIES}")
    # A weight-0 component is measured (logged), never rewarded: its None cannot drop a sample.
    pairs = [(s, w) for s, w in zip(scores, weights) if w != 0]
    if not pairs:
        return 0.0
    scores, weights = [s for s, _ in pairs], [w for _, w in pairs]
    if none_policy == "propagate" and any(s is None for s in scores):
        return None
    if none_policy == "skip" and all(s is None for s in scores):
        return None
    return float(sum(w * s for s, w in zip(scores, weights) if s is not None))


@dataclass(frozen=True)
class CompositeScores:
    """Per-completion combined rewards plus each component's batch scores (for logging)."""

    rewards: list[float | None]
    components: dict[str, BatchScores]


class CompositeReward:
    """Several verifiers with weights; each is scored with its own per-item time limit."""

    def __init__(self, specs: Sequence[RewardSpec], none_policy: NonePolicy = "propagate") -> None:
        if not specs:
            raise ValueError("a composite reward needs at least one component")
        keys = [s.key for s in specs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"reward components need distinct labels, got {keys}; set `label` to tell them apart")
        if none_policy not in NONE_POLICIES:
            raise ValueError(f"unknown none_policy {none_policy!r}; expected one of {NONE_POLICIES}")
        self.specs = list(specs)
        self.none_policy = none_policy
        self.verifiers: dict[str, Callable[..., Any]] = {s.key: get_verifier(s.name, **s.options) for s in specs}

    def score(
        self,
        completions: Sequence[str],
        references: Sequence[Any],
        fields: Sequence[Mapping[str, Any]] | None = None,
        *,
        timeout: float = 10.0,
        pool: WorkerPool | None = None,
    ) -> CompositeScores:
        components = {
            spec.key: score_batch(self.verifiers[spec.key], completions, references, fields, timeout=timeout, pool=pool)
            for spec in self.specs
        }
        weights = [spec.weight for spec in self.specs]
        rewards = [
            combine_scores([components[spec.key].results[i].score for spec in self.specs], weights, self.none_policy)
            for i in range(len(completions))
        ]
        return CompositeScores(rewards=rewards, components=components)
