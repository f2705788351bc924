"""Grade an extracted answer against the gold answer: a chain of small named strategies.

From cheap to expensive, each strategy answers ``True`` (equal), ``False`` (not
equal) or ``None`` (cannot tell, ask the next one):

1. ``string``    -- the two normalised strings are identical.
2. ``structure`` -- parse both into structures (:mod:`rewards.math.parse`) and compare
   them with exact numbers, words and strings (:mod:`rewards.math.compare`). No SymPy,
   no process round trip; this decides most answers.
3. ``sympy``     -- the same structural comparison with SymPy for the leaves it could
   not decide (:mod:`rewards.math.symbolic`), in a worker process killed after
   ``sympy_timeout`` seconds (:mod:`rewards.math.limits`).

``verify(gold, pred)`` is not symmetric: the gold answer decides what kind of object
is expected (a tuple is ordered, a list is not; ``x = 3`` is a name and a value, while
``2x + z = 1`` is an equation). Results are cached by ``(gold, pred, config)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rewards.math.compare import Comparer, Verdict, compare
from rewards.math.limits import run_limited
from rewards.math.normalize import compact, normalize
from rewards.math.parse import Node, parse_answer

GradeStatus = Literal["ok", "unscorable", "timeout", "error"]


@dataclass(frozen=True)
class GraderConfig:
    """How answers are compared."""

    float_rel_tol: float = 1e-6
    """Relative tolerance when either side is a decimal (a possibly rounded value).
    Exact values (integers, fractions, surds) must be exactly equal."""
    use_sympy: bool = True
    """Fall back to SymPy for what the cheap strategies cannot decide (else: not equal)."""
    sympy_timeout: float = 5.0
    """Wall-clock seconds for one SymPy comparison; the worker is killed after it."""
    numeric_points: int = 5
    """Random points at which expressions with free symbols must agree."""
    max_sympy_chars: int = 2000
    """Answers longer than this (gold + prediction) are not sent to SymPy: not equal."""
    max_answer_chars: int = 5000
    """A longer answer is only compared as a string (MATH answers are under 100 characters;
    parsing and matching a huge list would take seconds in the calling process)."""
    cache_size: int = 65536
    """Entries in the (gold, pred) result cache of this process (set when first used)."""


@dataclass(frozen=True)
class Grade:
    """Outcome of one comparison: ``equal``, the ``strategy`` that decided, and a
    ``status`` other than ``ok`` when it could not be decided (``reason`` says why;
    for a crash inside SymPy, ``traceback`` is the worker's traceback)."""

    equal: bool
    strategy: str
    status: GradeStatus = "ok"
    reason: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class _Pair:
    gold: str
    pred: str
    gold_node: Node
    pred_node: Node | None


class _Undecided(Exception):
    def __init__(self, status: GradeStatus, reason: str, traceback: str = "") -> None:
        super().__init__(reason)
        self.status, self.reason, self.traceback = status, reason, traceback


def string_match(pair: _Pair, config: GraderConfig) -> Verdict:
    return True if compact(normalize(pair.gold)) == compact(normalize(pair.pred)) else None


def structure_match(pair: _Pair, config: GraderConfig) -> Verdict:
    if pair.pred_node is None:
        return False
    return compare(pair.gold_node, pair.pred_node, Comparer(config.float_rel_tol))


def sympy_match(pair: _Pair, config: GraderConfig) -> Verdict:
    if not config.use_sympy or pair.pred_node is None:
        return False
    if len(pair.gold) + len(pair.pred) > config.max_sympy_chars:
        return False  # no real answer is this long; do not feed SymPy a parse bomb
    from rewards.math.symbolic import compare_with_sympy  # imports SymPy only in the worker

    outcome = run_limited(
        compare_with_sympy,
        pair.gold_node,
        pair.pred_node,
        config.float_rel_tol,
        config.numeric_points,
        timeout=config.sympy_timeout,
    )
    if outcome.status == "ok":
        return bool(outcome.value)
    if outcome.status == "timeout":
        raise _Undecided("timeout", f"SymPy comparison killed after {config.sympy_timeout:g}s")
    # SymPy raised (or its worker died): an error, never a silent "not equal".
    last_line = outcome.message.strip().splitlines()[-1] if outcome.message.strip() else "no message"
    raise _Undecided("error", f"SymPy comparison failed: {last_line}", outcome.message)


Strategy = Callable[[_Pair, GraderConfig], Verdict]
STRATEGIES: tuple[tuple[str, Strategy], ...] = (
    ("string", string_match),
    ("structure", structure_match),
    ("sympy", sympy_match),
)


def grade(gold: str, pred: str, config: GraderConfig | None = None) -> Grade:
    """Compare two *extracted* answers (see :func:`rewards.math.extract_answer`). Never raises."""
    config = config or GraderConfig()
    if not isinstance(gold, str) or not isinstance(pred, str):
        return Grade(False, "input", "error", f"answers must be strings, got {type(gold).__name__}, "
                     f"{type(pred).__name__}")
    return _cached_grade(config.cache_size)(gold, pred, config)


@functools.lru_cache(maxsize=4)
def _cached_grade(size: int) -> Callable[[str, str, GraderConfig], Grade]:
    return functools.lru_cache(maxsize=size)(_grade)


def clear_cache() -> None:
    """Forget cached grades (for example after changing tolerance defaults in a session)."""
    _cached_grade.cache_clear()


def _grade(gold: str, pred: str, config: GraderConfig) -> Grade:
    if max(len(gold), len(pred)) > config.max_answer_chars:
        equal = compact(normalize(gold)) == compact(normalize(pred))
        return Grade(equal, "string", "ok", f"an answer is longer than {config.max_answer_chars} characters")
    try:
        gold_node = parse_answer(gold)
        if gold_node is None:
            return Grade(False, "parse", "unscorable", "the gold answer is empty after normalisation")
        pair = _Pair(gold, pred, gold_node, parse_answer(pred))
        for name, strategy in STRATEGIES:
            verdict = strategy(pair, config)
            if verdict is not None:
                return Grade(verdict, name)
        return Grade(False, "none", "ok", "no strategy could decide")
    except _Undecided as undecided:
        return Grade(False, "sympy", undecided.status, undecided.reason, undecided.traceback)
    except RecursionError:
        return Grade(False, "parse", "error", "the answer is nested too deeply to parse")
    except Exception as exc:  # a bug or odd input must not crash a training step; reported, not hidden
        return Grade(False, "internal", "error", f"{type(exc).__name__}: {exc}")
