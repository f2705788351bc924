"""The reward layer's settings, as a run's configuration names them: a composite reward's components
(:class:`RewardSpec`, ``task.rewards``) and the audit's second verifier (:class:`AuditConfig`, ``task.audit``).
Nothing here imports the verifiers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RewardSpec:
    """One component of a composite reward: a registered verifier, its options and weight."""

    name: str
    """Registered verifier name (see ``rewards.list_verifiers()``)."""
    weight: float = 1.0
    """Multiplier of this component's score in the sum."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options passed to ``rewards.get_verifier(name, **options)``."""
    label: str | None = None
    """Name used in logs (``reward/<label>``); defaults to ``name``."""

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass
class AuditConfig:
    """``task.audit``: re-score a sample of each step's completions with a second verifier."""

    verifier: str | None = None
    """Registered verifier that re-scores the sample (``math`` with ``options: {strict: true}``,
    ``math_verify``, ``code``); null: no audit."""
    fraction: float = 0.1
    """Share of each step's completions audited (at least one when > 0)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the second verifier (``rewards.get_verifier(verifier, **options)``)."""
    seed: int = 0
    """Seed of the sample (combined with the step's sampling seed)."""
    asynchronous: bool = True
    """Score the sample in the reward worker pool while the step goes on (collected with the
    step's metrics); false: score it before the step continues (on the critical path)."""
