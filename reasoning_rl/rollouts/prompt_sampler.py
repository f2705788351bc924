"""Which training examples each step sees: a seeded permutation per epoch, resumable.

In a data-parallel run every rank walks the same permutation and draws the same global batch;
:meth:`PromptSampler.next` returns this rank's contiguous shard of it. Every rank's position
therefore advances identically, so the state rank 0 checkpoints resumes every rank exactly.
"""

from __future__ import annotations

import copy
import random

from reasoning_rl import distributed


class PromptSampler:
    """Walks the training examples in a fresh seeded permutation per epoch; its state
    (epoch, position) is saved in checkpoints so a resumed run sees the same prompts."""

    def __init__(self, num_examples: int, seed: int) -> None:
        if num_examples == 0:
            raise ValueError("the task's training split is empty")
        self.num_examples, self.seed = num_examples, seed
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.num_examples))
        random.Random(self.seed * 100_003 + epoch).shuffle(order)
        return order

    def next(self, k: int) -> list[int]:
        """The next ``k`` examples of the global order, or this rank's ``k / world_size`` of them
        in a data-parallel run (``k`` must then be a multiple of the number of ranks)."""
        start, end = distributed.shard_bounds(k, "prompts per step (algo.prompts_per_step)")
        return self.next_global(k)[start:end]

    def next_global(self, k: int) -> list[int]:
        """The next ``k`` examples of the global order (every rank's, whatever the world size)."""
        out = []
        for _ in range(k):
            if self.position == self.num_examples:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def upcoming(self, k: int, steps: int) -> list[list[int]]:
        """The global examples of the next ``steps`` calls of ``next_global(k)``, without advancing:
        a pure function of (seed, epoch, position), so the prompts of a future step are known now
        (asynchronous rollouts sample them ahead, reasoning_rl.rollouts.async_engine)."""
        ahead = copy.copy(self)  # shares this epoch's permutation (next_global replaces it, never changes it)
        return [ahead.next_global(k) for _ in range(steps)]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)
