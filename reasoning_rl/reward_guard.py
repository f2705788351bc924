"""Stop a run whose rewards cannot be computed, instead of training on (and reporting) zeros.

A verifier that raises, hangs past ``rollout.reward_timeout`` or cannot score an item gives that
item no reward (NaN, left out by the estimators). A few such items are normal; a verifier that
fails on most of them makes every later number meaningless (``loss/total`` 0, held-out accuracy
0.0%) while the run looks healthy. :class:`RewardGuard` is fed each scoring batch's outcome, per
reward component (verifier), from where the scores are produced: training steps
(:func:`reasoning_rl.algo.groups.sample_and_score`), held-out evaluation and the warm-start probe
(:mod:`reasoning_rl.evaluation.heldout`). With f = failed items (status ``error``
or ``timeout``: :data:`FAILED`) and n = items scored by one verifier:

    any batch:        f == n > 0                                  -> stop (BrokenRewardError)
    training steps:   sum f / sum n over the last W steps > s     -> stop, once W steps are seen
    an evaluation:    f / n > s (the evaluation is its own window) -> stop
    0 < f below that                                              -> one warning per verifier
    the first timeout of a verifier                               -> one warning naming it

where s = ``trainer.max_failed_reward_share`` and W = ``trainer.failed_reward_window``. The error
is a :class:`~reasoning_rl.errors.UserError`: the run's ``status.json`` records ``failed`` and
``reasoning-rl-train`` prints one line and exits with code 2 (docs/errors.md).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reasoning_rl.errors import UserError
from rewards.batch import BatchScores

log = logging.getLogger(__name__)

FAILED = ("error", "timeout")
"""Verifier statuses that say the verifier itself failed. ``unscorable`` is left out: it is as often
the completion's fault as the verifier's (the code verifier's "no code found in the completion", which
an untrained policy gets on every item), so it is counted (``not_scored``, ``verifier/unscorable``)
but never stops a run."""
NOT_SCORED = ("error", "timeout", "unscorable")
"""Verifier statuses that leave an item without a score (held-out tables count them)."""

TRAINING = "training step"


class BrokenRewardError(UserError, RuntimeError):
    """The reward's verifier failed on every item of a batch, or on more than
    ``trainer.max_failed_reward_share`` of the items over ``trainer.failed_reward_window`` steps."""


@dataclass(frozen=True)
class Failures:
    """One verifier's outcome on one batch: failed items by status, items in all, the first failure's reason."""

    counts: Mapping[str, int]
    total: int
    first_reason: str = ""

    @property
    def failed(self) -> int:
        return sum(self.counts.values())

    def describe(self) -> str:
        """``error=8, timeout=0 of 8`` style, the non-zero statuses only."""
        parts = [f"{k}={v}" for k, v in self.counts.items() if v]
        return ", ".join(parts) or "none"

    @classmethod
    def of(cls, batch: BatchScores) -> Failures:
        counts = {s: sum(r.status == s for r in batch.results) for s in FAILED}
        first = next((r for r in batch.results if r.status in FAILED), None)
        reason = "" if first is None else str(first.info.get("reason", first.status))
        return cls(counts, len(batch.results), " ".join(reason.split())[:200])


def not_scored(batch: BatchScores) -> dict[str, int]:
    """The items of ``batch`` left without a score, by status (non-zero counts only): ``{"error": 3}``."""
    counts = {s: sum(r.status == s for r in batch.results) for s in NOT_SCORED}
    return {k: v for k, v in counts.items() if v}


def describe_not_scored(counts: Mapping[str, int]) -> str:
    """``error=3, timeout=1`` (as ``reasoning-rl-eval`` prints it); "" when every item was scored."""
    return ", ".join(f"{k}={v}" for k, v in counts.items() if v)


@dataclass
class RewardGuard:
    """Watches the verifiers' failures over a run (the rule in the module docstring)."""

    max_failed_share: float = 0.5
    """``trainer.max_failed_reward_share``: above this share of failed items the run stops."""
    window: int = 10
    """``trainer.failed_reward_window``: training steps the share is measured over."""
    _history: dict[str, deque[tuple[int, int]]] = field(default_factory=dict, repr=False)
    _warned: set[str] = field(default_factory=set, repr=False)
    _timed_out: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def of(cls, trainer: Any) -> RewardGuard:
        """The guard of a run's ``trainer`` settings (``reasoning_rl.config.TrainerConfig``)."""
        return cls(trainer.max_failed_reward_share, trainer.failed_reward_window)

    def observe(self, phase: str, components: Mapping[str, BatchScores]) -> None:
        """Check one scoring batch, each reward component (verifier key -> its scores) on its own.
        ``phase``: :data:`TRAINING` (windowed) or the evaluation it was (``held-out evaluation``,
        ``warm-start probe``: judged on its own). Raises :class:`BrokenRewardError` to stop the run."""
        for verifier, batch in components.items():
            self._check(phase, verifier, Failures.of(batch))

    def _check(self, phase: str, verifier: str, f: Failures) -> None:
        if f.total == 0:
            return
        if f.counts["timeout"] and verifier not in self._timed_out:
            self._timed_out.add(verifier)
            log.warning("verifier %s timed out on %d of %d items of a %s (each killed after rollout.reward_timeout); "
                        "a verifier that hangs costs that much wall time per item", verifier, f.counts["timeout"],
                        f.total, phase)
        if f.failed == f.total:
            raise BrokenRewardError(
                f"verifier {verifier} failed on every item of a {phase} ({f.describe()} of {f.total}; first: "
                f"{f.first_reason or 'no reason given'}): fix the verifier or its options in task.rewards, then "
                "run the command again")
        if phase == TRAINING:
            history = self._history.setdefault(verifier, deque(maxlen=self.window))
            history.append((f.failed, f.total))
            failed, total = sum(a for a, _ in history), sum(b for _, b in history)
            judged = len(history) == self.window
            where = f"the last {len(history)} training steps"
        else:
            failed, total, judged, where = f.failed, f.total, True, f"a {phase}"
        share = failed / total
        if judged and share > self.max_failed_share:
            raise BrokenRewardError(
                f"verifier {verifier} failed on {failed} of {total} items ({share:.0%}) over {where}, more than "
                f"trainer.max_failed_reward_share={self.max_failed_share:g} (this batch: {f.describe()}; first: "
                f"{f.first_reason or 'no reason given'}): fix the verifier or its options in task.rewards, or raise "
                "trainer.max_failed_reward_share")
        if f.failed and verifier not in self._warned:
            self._warned.add(verifier)
            log.warning("verifier %s failed on %d of %d items of a %s (%s; first: %s); these items get no reward. "
                        "The run stops when more than trainer.max_failed_reward_share=%g of the items fail over "
                        "trainer.failed_reward_window=%d steps", verifier, f.failed, f.total, phase, f.describe(),
                        f.first_reason or "no reason given", self.max_failed_share, self.window)
