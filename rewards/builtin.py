"""Built-in shaping rewards every GRPO user expects: a format reward and DAPO's overlong penalty."""

from __future__ import annotations

import re
from typing import Any, Literal

from rewards.registry import register_verifier
from rewards.types import VerifierResult

FORMAT_PATTERNS: dict[str, re.Pattern[str]] = {
    # DeepSeek-R1 style: reasoning in <think>, final answer in <answer>, nothing else around them.
    "think_answer": re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL),
    # Only an <answer>...</answer> block somewhere.
    "answer_tag": re.compile(r"<answer>.*?</answer>", re.DOTALL),
    # A \boxed{...} anywhere (MATH-style answers).
    "boxed": re.compile(r"\\boxed\s*\{"),
}


@register_verifier("format")
class FormatReward:
    """1.0 when the completion has the expected layout, else 0.0.

    ``style``: ``think_answer`` (``<think>...</think><answer>...</answer>``, the
    DeepSeek-R1 template), ``answer_tag`` or ``boxed``; or pass ``pattern`` (a
    regular expression searched in the completion) for your own layout.
    """

    def __init__(self, style: Literal["think_answer", "answer_tag", "boxed"] = "think_answer",
                 pattern: str | None = None) -> None:
        if pattern is not None:
            self.pattern = re.compile(pattern, re.DOTALL)
        elif style in FORMAT_PATTERNS:
            self.pattern = FORMAT_PATTERNS[style]
        else:
            raise ValueError(f"unknown format style {style!r}; expected one of {sorted(FORMAT_PATTERNS)} or pass pattern=")

    def __call__(self, completion: str, reference: Any = None, **fields: Any) -> VerifierResult:
        return VerifierResult.ok(1.0 if self.pattern.search(completion) else 0.0)


def overlong_penalty(length: int, max_length: int, buffer: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, eq. 13).

    R(L) = 0                              if L <= L_max - L_buffer
         = ((L_max - L_buffer) - L) / L_buffer   if L_max - L_buffer < L <= L_max
         = -1                             if L > L_max
    """
    if buffer <= 0 or buffer > max_length:
        raise ValueError(f"need 0 < buffer <= max_length, got buffer={buffer}, max_length={max_length}")
    start = max_length - buffer
    if length <= start:
        return 0.0
    if length <= max_length:
        return (start - length) / buffer
    return -1.0


@register_verifier("overlong")
class OverlongPenalty:
    """DAPO soft overlong penalty on the completion length in tokens.

    The length is read from the field ``length_field`` (the trainer passes
    ``num_completion_tokens``); with ``unit="chars"`` the completion's character
    count is used instead, for callers that have no tokenizer.
    """

    def __init__(self, max_length: int, buffer: int, length_field: str = "num_completion_tokens",
                 unit: Literal["tokens", "chars"] = "tokens") -> None:
        overlong_penalty(0, max_length, buffer)  # validates the arguments
        if unit not in ("tokens", "chars"):
            raise ValueError(f"unit must be 'tokens' or 'chars', got {unit!r}")
        self.max_length, self.buffer, self.length_field, self.unit = max_length, buffer, length_field, unit

    def __call__(self, completion: str, reference: Any = None, **fields: Any) -> VerifierResult:
        if self.unit == "chars":
            length = len(completion)
        elif self.length_field in fields:
            length = int(fields[self.length_field])
        else:
            return VerifierResult.unscorable(
                f"field {self.length_field!r} (completion length in tokens) is missing; "
                "pass it in the fields or use unit='chars'"
            )
        return VerifierResult.ok(overlong_penalty(length, self.max_length, self.buffer), length=length)
