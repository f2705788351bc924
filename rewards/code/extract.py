"""Pull the program out of a model completion (a pure step, before any execution)."""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["last_block", "raw", "auto"]
EXTRACT_MODES: tuple[ExtractMode, ...] = ("last_block", "raw", "auto")

# ```python / ```py / ```Python3 / bare ``` fences; the closing fence may be missing when the
# completion was cut at the length limit.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"", "python", "python3", "py", "py3"}


def extract_code(completion: str, mode: ExtractMode = "auto") -> str | None:
    """The program in ``completion``.

    * ``last_block``: the last fenced block tagged python (or untagged); None if there is none.
    * ``raw``: the completion as it is (base-model continuations, e.g. a HumanEval body).
    * ``auto``: ``last_block`` when the completion has a fence, else ``raw``.
    """
    if mode not in EXTRACT_MODES:
        raise ValueError(f"unknown extraction mode {mode!r}; choose one of {EXTRACT_MODES}")
    if mode == "raw":
        return completion
    blocks = [body for tag, body in _FENCE.findall(completion) if tag.lower() in _PYTHON_TAGS]
    if blocks:
        return blocks[-1]
    return completion if mode == "auto" and "```" not in completion else None
