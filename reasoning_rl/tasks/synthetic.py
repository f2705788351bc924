"""What the synthetic tasks share: a fixed train/test assignment by hash, and drawing rows from a pool.

A generated problem belongs to ``train`` or ``test`` for good (a hash of its text), so held-out
evaluation never sees a training problem whatever the seeds; training rows cycle their pool in a
new random order each pass. Used by :mod:`reasoning_rl.tasks.arithmetic` and
:mod:`reasoning_rl.tasks.code_synthetic`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def hash_bucket(text: str) -> float:
    """A stable number in [0, 1] for ``text``: its sha256's first 32 bits over 2^32 - 1."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def problem_split(text: str, test_fraction: float) -> str:
    """``test`` for a stable ``test_fraction`` of problems (by the sha256 of ``text``), else ``train``."""
    return "test" if hash_bucket(text) < test_fraction else "train"


def check_split(task: str, split: str) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"{task} split must be 'train' or 'test', got {split!r}")


def draw(pool: Sequence[T], num_examples: int, seed: int, cycle: bool) -> list[T]:
    """``num_examples`` items of ``pool`` in a random order (``seed``); when the pool is smaller it is
    cycled, each pass in a new order, or with ``cycle=False`` (evaluation) every item is returned once."""
    rng = random.Random(seed)
    if not cycle:
        num_examples = min(num_examples, len(pool))
    out: list[T] = []
    while len(out) < num_examples:
        order = list(pool)
        rng.shuffle(order)
        out += order[: num_examples - len(out)]
    return out
