"""A synthetic task the tiny model cannot do in its head: ``a * b`` with two 3-digit numbers.

Writing ``print(a * b)`` in a ```python block solves it with the ``python_tool`` environment
(``task=multiply_tool``, docs/tools.md); the same problems without the tool (``task=multiply``)
must be answered directly. Each problem lies in ``train`` or ``test`` for good (a hash of its
text, :func:`reasoning_rl.tasks.synthetic.problem_split`), so held-out problems are never trained
on; the two definitions draw the same held-out problems.
"""

from __future__ import annotations

import random

from reasoning_rl.tasks.synthetic import check_split, problem_split


def make_multiplication_dataset(num_examples: int, seed: int, split: str, low: int = 100, high: int = 999,
                                test_fraction: float = 0.2, cycle: bool = True) -> list[dict]:
    """``num_examples`` problems ``a * b`` with ``low <= a, b <= high`` from ``split``, drawn with ``seed``.

    Each row: ``id`` (``"multiply/123*456"``), ``question`` ("What is 123 * 456?"), ``a``, ``b``,
    ``answer`` ("56088"). Training rows (``cycle=True``) may repeat a problem; with ``cycle=False``
    (evaluation) every problem appears at most once.
    """
    check_split("multiplication", split)
    if not 0 <= low <= high:
        raise ValueError(f"multiplication operands need 0 <= low <= high, got low={low}, high={high}")
    pool_size = (high - low + 1) ** 2
    rng = random.Random(seed)
    rows: list[dict] = []
    seen: set[tuple[int, int]] = set()
    tries = 0
    while len(rows) < num_examples:
        tries += 1
        if tries > 50 * num_examples + 10_000 or (not cycle and len(seen) >= pool_size):
            if rows and not cycle:
                break
            raise ValueError(f"the multiplication {split} split has too few problems for {num_examples} rows; "
                             f"widen low..high ({low}..{high}) or change test_fraction")
        a, b = rng.randint(low, high), rng.randint(low, high)
        question = f"What is {a} * {b}?"
        if problem_split(question, test_fraction) != split or (not cycle and (a, b) in seen):
            continue
        seen.add((a, b))
        rows.append({"id": f"multiply/{a}*{b}", "question": question, "a": a, "b": b, "answer": str(a * b)})
    return rows
