"""The one interface every layer of the rollout stack implements (reasoning_rl.rollouts.stack, docs/rollouts.md).

A layer is a rollout engine: the base engine of ``rollout.backend`` or a wrapper around the layer below
it (injected mismatch, asynchrony, episodes, sharding). The run loop never calls these methods on a layer
directly; it calls the stack, which calls them on each of its tops in a fixed order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from reasoning_rl.rollouts.sampling import Completion, SamplingConfig


@runtime_checkable
class RolloutLayer(Protocol):
    """Samples completions and follows the trainer's policy, version by version."""

    @property
    def policy_version(self) -> int:
        """The version (RL updates done) of the weights this layer samples with now."""
        ...

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig,
                 seed: int | None = None) -> list[list[Completion]]:
        """``n`` completions for each prompt, grouped per prompt, in prompt order."""
        ...

    def update_policy(self, model: Any, version: int) -> None:
        """Sync to the trainer's policy ``model`` after ``version`` updates (a wrapper passes it down)."""
        ...

    def pop_metrics(self) -> dict[str, float]:
        """What the layer measured since the last call (namespaced, docs/metrics.md); then forgets it."""
        ...

    def close(self) -> None:
        """Release what this layer holds itself (a process, a copy of the weights); never the layer below,
        which the stack closes in its turn."""
        ...
