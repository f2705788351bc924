"""A synthetic arithmetic task ("What is 7 * 8?") that needs no download.

Problems are the full grid ``a <op> b`` for ``a, b`` in ``[0, max_operand]``; each
problem is assigned for good to the ``train`` or ``test`` split by a hash of its
text, so held-out evaluation never sees a training problem, whatever the seeds.
The dataset definition ``reasoning_rl/tasks/definitions/arithmetic.yaml`` names
:func:`make_arithmetic_dataset` as its generator, with the settings of each split.
"""

from __future__ import annotations

from reasoning_rl.tasks.synthetic import check_split, draw, problem_split

__all__ = ["OPERATIONS", "make_arithmetic_dataset", "problem_split"]

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def make_arithmetic_dataset(
    num_examples: int,
    seed: int,
    split: str,
    max_operand: int = 20,
    operations: str = "+-*",
    test_fraction: float = 0.2,
    cycle: bool = True,
) -> list[dict]:
    """``num_examples`` problems from ``split`` (``train``/``test``), sampled with ``seed``.

    Each row: ``id`` (the problem itself, ``"arithmetic/7*8"``: a cycled row repeats its
    problem's id), ``question`` ("What is 7 * 8?"), ``answer`` ("56"). When the split holds
    fewer problems than asked, it is cycled in a new random order, or, with ``cycle=False``
    (evaluation), every problem is returned once.
    """
    check_split("arithmetic", split)
    unknown = set(operations) - set(OPERATIONS)
    if unknown or not operations:
        raise ValueError(f"unknown arithmetic operations {sorted(unknown)}; choose from {''.join(OPERATIONS)}")
    pool = []
    for op in operations:
        for a in range(max_operand + 1):
            for b in range(max_operand + 1):
                question = f"What is {a} {op} {b}?"
                if problem_split(question, test_fraction) == split:
                    pool.append((f"arithmetic/{a}{op}{b}", question, str(OPERATIONS[op](a, b))))
    if not pool:
        raise ValueError(f"the arithmetic {split} split is empty; raise max_operand or test_fraction")
    return [{"id": problem_id, "question": question, "answer": answer}
            for problem_id, question, answer in draw(pool, num_examples, seed, cycle)]
