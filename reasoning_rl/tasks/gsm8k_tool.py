"""``gsm8k_tool``'s rows: GSM8K's, each with ``episode``, its worked answer as a ``python_tool`` episode.

GSM8K's worked answers mark every calculation with a calculator annotation, an arithmetic
expression and its value: ``Natalia sold 48/2 = <<48/2=24>>24 clips in May.`` That is what a tool
call computes. :func:`tool_episode` puts the annotations of the answer's lines into at most
``max_calls`` ```` ```python ```` blocks that print them, each followed by ```` ```output ```` and the
output ``python_tool`` writes for that program (the observation), then the lines themselves with
the annotations dropped, and ends with the boxed answer the ``math`` verifier reads::

    ```python
    print(48/2)
    ```
    ```output
    24.0                                <- observation: what Python prints for 48/2
    ```
    Natalia sold 48/2 = 24 clips in May.
    ```python
    print(48+24)
    ```
    ```output
    72
    ```
    Natalia sold 48+24 = 72 clips altogether in April and May.
    The final answer is \\boxed{72}.

Nothing runs here: :func:`evaluate` computes each expression with Python's own arithmetic on an
``ast`` that may hold only numbers, ``+ - * / // % **`` and parentheses, so ``str(value)`` is what
``print`` writes (a test checks the blocks against :meth:`PythonTool.step`). An answer with no
annotation, or one whose annotation does not evaluate or does not equal its stated value (GSM8K
sometimes rounds: ``<<10/3=3.33>>``), keeps its plain worked answer (:func:`plain_answer`): the output
would contradict the text. The definition (``reasoning_rl/tasks/definitions/gsm8k_tool.yaml``) makes
``episode`` the warm start's target (``warmstart.target=solution``); ``warmstart.mask_observations``
leaves the output blocks out of the loss (:meth:`PythonTool.observation_spans` finds them).
"""

from __future__ import annotations

import ast
import logging
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reasoning_rl.envs.python_tool import STOP, output_observation
from reasoning_rl.tasks.extractors import gsm8k_final

log = logging.getLogger(__name__)

ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>=]*)>>")
"""A calculator annotation ``<<expression=value>>`` of a GSM8K answer."""
_ANY_ANNOTATION = re.compile(r"<<[^<>]*>>")
FINAL_LINE = "The final answer is \\boxed{{{answer}}}."
"""The last line of every target: the ``math`` verifier reads the boxed number."""
MAX_EXPONENT = 64
"""Largest ``|exponent|`` :func:`evaluate` computes (GSM8K's are at most 10); larger is refused."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class NotArithmeticError(ValueError):
    """An annotation that :func:`evaluate` does not compute: not Python, a name or call, a division by
    zero, an exponent above :data:`MAX_EXPONENT`, an overflow."""


def evaluate(expression: str) -> int | float:
    """The value Python gives ``expression``, computed only if it is arithmetic on number literals.

    >>> evaluate("48/2"), evaluate("(3+4)*2 - 1"), evaluate("7//2"), evaluate("2**10")
    (24.0, 13, 3, 1024)
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:  # "05" (a leading zero), "1,000" parses as a tuple and is refused below
        raise NotArithmeticError(f"{expression!r} is not a Python expression ({exc.msg})") from None

    def value(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise NotArithmeticError(f"{expression!r}: exponent {right} is above {MAX_EXPONENT}")
            try:
                return _BINARY[type(node.op)](left, right)
            except (ZeroDivisionError, OverflowError) as exc:
                raise NotArithmeticError(f"{expression!r}: {exc}") from None
        raise NotArithmeticError(f"{expression!r} holds {type(node).__name__}: only numbers, + - * / // % ** "
                                 "and parentheses are computed")

    result = value(tree.body)
    if isinstance(result, complex):  # a negative number to a fractional power
        raise NotArithmeticError(f"{expression!r} is complex")
    return result


def matches(result: int | float, stated: str) -> bool:
    """Whether the annotation's stated value equals ``result`` (up to float rounding, 1e-9 relative)."""
    try:
        number = float(stated.strip().replace(",", ""))
    except ValueError:
        return False
    return math.isclose(result, number, rel_tol=1e-9, abs_tol=1e-9)


def strip_annotations(line: str) -> str:
    """``line`` without its calculator annotations: ``48/2 = <<48/2=24>>24`` -> ``48/2 = 24``."""
    return _ANY_ANNOTATION.sub("", line)


def plain_answer(answer: str) -> str:
    """The worked answer as text: its lines without annotations, then the boxed final answer."""
    lines = [strip_annotations(line) for line in _steps(answer)]
    return "\n".join([*lines, FINAL_LINE.format(answer=gsm8k_final(answer))])


def _steps(answer: str) -> list[str]:
    """The worked answer's lines before its ``#### <answer>`` line."""
    return answer.rsplit("####", 1)[0].rstrip("\n").split("\n")


def _groups(lines: list[str], max_calls: int) -> tuple[list[str], list[list[str]]]:
    """``(preface, groups)``: the lines before the first annotated one, then the rest cut into at most
    ``max_calls`` runs of consecutive lines, each starting at an annotated line; the annotated lines are
    shared out as evenly as they go, the earlier runs taking one more."""
    annotated = [i for i, line in enumerate(lines) if ANNOTATION.search(line)]
    calls = min(max_calls, len(annotated))
    per, extra = divmod(len(annotated), calls)
    starts, k = [], 0
    for j in range(calls):
        starts.append(annotated[k])
        k += per + (j < extra)
    ends = [*starts[1:], len(lines)]
    return lines[: starts[0]], [lines[s:e] for s, e in zip(starts, ends)]


def tool_episode(answer: str, max_calls: int = 2, max_output_chars: int = 400) -> str | None:
    """GSM8K's worked ``answer`` as a ``python_tool`` episode with at most ``max_calls`` tool calls
    (module docstring), or None when it has no annotation or one that does not evaluate to its stated
    value. ``max_output_chars`` is the environment's option of that name.

    >>> print(tool_episode("He has 3*2 = <<3*2=6>>6 pens.\\n#### 6"))
    ```python
    print(3*2)
    ```
    ```output
    6
    ```
    He has 3*2 = 6 pens.
    The final answer is \\boxed{6}.
    """
    if max_calls < 1:
        raise ValueError(f"max_calls must be >= 1, got {max_calls}")
    lines = _steps(answer)
    if not any(ANNOTATION.search(line) for line in lines) or _ANY_ANNOTATION.sub("", answer) != ANNOTATION.sub(
            "", answer):  # no annotation, or one that is not <<expression=value>>
        return None
    preface, groups = _groups(lines, max_calls)
    parts = [line + "\n" for line in preface]
    for group in groups:
        expressions, printed = [], []
        for expression, stated in (m.groups() for line in group for m in ANNOTATION.finditer(line)):
            try:
                result = evaluate(expression)
            except NotArithmeticError:
                return None
            if not matches(result, stated):
                return None
            expressions.append(expression.strip())
            printed.append(str(result))
        code = "".join(f"print({e})\n" for e in expressions)
        parts.append(f"```python\n{code}```\n{STOP}")
        parts.append(output_observation("\n".join(printed), max_output_chars))
        parts.extend(strip_annotations(line) + "\n" for line in group)
    parts.append(FINAL_LINE.format(answer=gsm8k_final(answer)))
    return "".join(parts)


@dataclass(frozen=True)
class Conversion:
    """How many rows of a split got a tool episode, and how many kept the plain worked answer."""

    tool: int
    plain: int


def add_episodes(rows: list[dict[str, Any]], max_calls: int = 2,
                 max_output_chars: int = 400) -> Conversion:
    """Set each row's ``episode`` (:func:`tool_episode`, or :func:`plain_answer` when there is none) and
    ``tool_calls`` (the episode's tool calls, 0 for a plain answer), in place."""
    tool = 0
    for row in rows:
        episode = tool_episode(row["answer"], max_calls, max_output_chars)
        row["tool_calls"] = 0 if episode is None else episode.count(STOP)
        row["episode"] = plain_answer(row["answer"]) if episode is None else episode
        tool += episode is not None
    return Conversion(tool=tool, plain=len(rows) - tool)


def make_gsm8k_tool_rows(split: str, data_dir: str | None = None, max_calls: int = 2,
                         max_output_chars: int = 400) -> list[dict[str, Any]]:
    """GSM8K's rows of ``split``, loaded as ``task=gsm8k`` loads them (``data_dir``: the folder holding
    ``gsm8k_<split>.jsonl``; None: the hub), each with ``episode`` and ``tool_calls``
    (:func:`add_episodes`). ``max_calls`` and ``max_output_chars`` must fit the environment: at most
    ``task.episode.max_turns - 1`` calls, python_tool's ``max_output_chars``."""
    from reasoning_rl.tasks.data import TaskDataError, load_rows
    from reasoning_rl.tasks.definition import get_definition

    try:
        rows, origin = load_rows(get_definition("gsm8k"), split, data_dir=data_dir)
    except TaskDataError as exc:
        raise TaskDataError(f"gsm8k_tool's rows are GSM8K's, read by its generator: {exc}. Pass the folder "
                            f"holding gsm8k_{split}.jsonl (task.data_dir=<folder> in training, data_dir=<folder> "
                            "in evaluation)") from exc
    counts = add_episodes(rows, max_calls, max_output_chars)
    log.info("gsm8k_tool %s (%s): %d rows, %d tool episodes, %d plain worked answers (no annotation, or one "
             "that does not evaluate to its stated value)", split, origin, len(rows), counts.tool, counts.plain)
    return rows
