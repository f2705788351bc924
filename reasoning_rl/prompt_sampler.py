"""Which training examples each step sees: a seeded permutation per epoch, resumable."""

from __future__ import annotations

import random


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
        out = []
        for _ in range(k):
            if self.position == self.num_examples:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)
