"""A synthetic code task a tiny model can learn on a CPU: write the expression a one-line function returns.

Each problem is a Python stub whose docstring says in words what ``f`` computes; the
completion is the expression after ``return``, and hidden tests (inputs never shown in the
prompt) run it in the code verifier's sandbox, in its HumanEval format::

    def f(x):
        \"\"\"Return the larger of x and 7.\"\"\"
        return max(x, 7)                        <- the completion is "max(x, 7)"

    def check(candidate):                       <- hidden: the `test` field
        assert candidate(-7) == 7
        ...

Problems are the grid of every operation of :data:`OPERATIONS` with every constant in
``[1, max_constant]``; each lies in ``train`` or ``test`` for good by a hash of its stub
(:func:`reasoning_rl.tasks.synthetic.problem_split`), so held-out problems pair an operation
with constants it was never trained on with. The dataset definition
``reasoning_rl/tasks/definitions/code_synthetic.yaml`` names :func:`make_code_dataset`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reasoning_rl.tasks.synthetic import draw, problem_split


@dataclass(frozen=True)
class Operation:
    """One family of functions ``f(x)`` with a constant ``c``."""

    words: str
    """The docstring's description, formatted with ``c``."""
    code: str
    """The reference expression, formatted with ``c``."""
    fn: Callable[[int, int], int]
    """``fn(x, c)``: the value the hidden tests expect."""


OPERATIONS: dict[str, Operation] = {
    "add": Operation("x plus {c}", "x + {c}", lambda x, c: x + c),
    "sub": Operation("x minus {c}", "x - {c}", lambda x, c: x - c),
    "rsub": Operation("{c} minus x", "{c} - x", lambda x, c: c - x),
    "mul": Operation("x times {c}", "x * {c}", lambda x, c: x * c),
    "floordiv": Operation("x divided by {c}, rounded down", "x // {c}", lambda x, c: x // c),
    "mod": Operation("the remainder of x divided by {c}", "x % {c}", lambda x, c: x % c),
    "max": Operation("the larger of x and {c}", "max(x, {c})", lambda x, c: max(x, c)),
    "min": Operation("the smaller of x and {c}", "min(x, {c})", lambda x, c: min(x, c)),
    "absdiff": Operation("the distance between x and {c}", "abs(x - {c})", lambda x, c: abs(x - c)),
    "twice": Operation("twice x plus {c}", "2 * x + {c}", lambda x, c: 2 * x + c),
}

TEST_INPUTS: tuple[int, ...] = (-7, -2, 0, 3, 8, 13, 21, 44, 9973)
"""Inputs of the hidden tests, never in the prompt. With constants 1-99, any two functions of the grid
that differ somewhere in -1000..1000 differ on one of these (tests/reasoning_rl/tasks/test_code_synthetic.py):
negatives tell ``//`` from ``%``; 9973 tells ``x // c`` from ``x // (c + 1)`` (9973 / c - 9973 / (c + 1) >= 1
while c * (c + 1) <= 9973; 997 told them apart only up to c = 30)."""


DEFAULT_OPERATIONS = ",".join(OPERATIONS)
"""Every operation: the default grid is these 10 times constants 1-99, 990 functions (239 held out)."""


def stub(op: Operation, c: int) -> str:
    """The prompt: the function's signature, its docstring, and ``return `` left open."""
    return f'def f(x):\n    """Return {op.words.format(c=c)}."""\n    return '


def function_split(prompt: str, test_fraction: float, validation_fraction: float = 0.0) -> str:
    """``test`` for a ``test_fraction`` of stubs; of the rest, ``validation`` for a ``validation_fraction``
    (by an independent hash), else ``train``."""
    if problem_split(prompt, test_fraction) == "test":
        return "test"
    return "validation" if problem_split("validation:" + prompt, validation_fraction) == "test" else "train"


def check_code(op: Operation, c: int) -> str:
    """The hidden tests as a HumanEval ``check(candidate)``: one assert (one test) per input."""
    lines = [f"    assert candidate({x}) == {op.fn(x, c)}" for x in TEST_INPUTS]
    return "def check(candidate):\n" + "\n".join(lines) + "\n"


def make_code_dataset(
    num_examples: int,
    seed: int,
    split: str,
    max_constant: int = 99,
    operations: str = DEFAULT_OPERATIONS,
    test_fraction: float = 0.25,
    cycle: bool = True,
    validation_fraction: float = 0.0,
) -> list[dict]:
    """``num_examples`` problems of ``split`` (``train``/``test``), sampled with ``seed``.

    Each row: ``id`` (``"code_synthetic/max/7"``), ``prompt`` (the stub), ``test`` (the hidden
    ``check``), ``entry_point`` (``"f"``), ``solution`` (the reference expression, the warm
    start's target). ``operations`` is a comma-separated subset of :data:`OPERATIONS`. The split is
    cycled like the arithmetic task's (:func:`reasoning_rl.tasks.synthetic.draw`).

    ``validation_fraction`` > 0 moves that share of the TRAINING functions (a second hash of the stub)
    to a ``validation`` split, for choosing settings without looking at ``test``; ``train`` then
    leaves them out. ``test`` is the same whatever ``validation_fraction`` is.
    """
    if split not in ("train", "validation", "test"):
        raise ValueError(f"code_synthetic split must be 'train', 'validation' or 'test', got {split!r}")
    if split == "validation" and validation_fraction <= 0:
        raise ValueError("the code_synthetic validation split is empty: set its share of the training functions, "
                         "e.g. +task.source_kwargs.validation_fraction=0.2")
    names = [n.strip() for n in operations.split(",") if n.strip()]
    unknown = sorted(set(names) - set(OPERATIONS))
    if unknown or not names:
        raise ValueError(f"unknown code_synthetic operations {unknown}; choose from {','.join(OPERATIONS)}")
    if max_constant < 1:
        raise ValueError(f"max_constant must be >= 1 (the constants are 1..max_constant), got {max_constant}")
    pool = []
    for name in names:
        op = OPERATIONS[name]
        for c in range(1, max_constant + 1):
            prompt = stub(op, c)
            if function_split(prompt, test_fraction, validation_fraction) == split:
                pool.append({"id": f"code_synthetic/{name}/{c}", "prompt": prompt, "test": check_code(op, c),
                             "entry_point": "f", "solution": op.code.format(c=c)})
    if not pool:
        raise ValueError(f"the code_synthetic {split} split is empty; raise max_constant or test_fraction")
    return [dict(row) for row in draw(pool, num_examples, seed, cycle)]
