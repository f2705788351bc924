"""Brace matching in LaTeX text, shared by answer extraction and normalisation."""

from __future__ import annotations

import re

# What the scan looks at: a backslash with the character after it (one escape), or a brace.
_TOKEN_RE = re.compile(r"\\.|[{}]", re.DOTALL)


def matching_brace(text: str, open_index: int) -> int:
    """Index of the ``}`` that closes the ``{`` at ``open_index``; -1 when it is never closed.

    Escapes: a backslash escapes the one character after it, whatever it is. So ``\\{``
    and ``\\}`` (a set's braces) are not counted, while in ``\\\\}`` the two backslashes
    are one escaped backslash (a LaTeX line break) and the ``}`` after them does count.
    Command names need no special case (``\\frac{`` escapes only the ``f``). The brace at
    ``open_index`` itself is taken as an opener; the caller knows it is not escaped.

    Raises ``ValueError`` when ``text[open_index]`` is not ``{``.
    """
    if not 0 <= open_index < len(text) or text[open_index] != "{":
        found = repr(text[open_index]) if 0 <= open_index < len(text) else "the end of the text"
        raise ValueError(f"matching_brace needs the index of a '{{'; index {open_index} is {found}")
    depth = 0
    for token in _TOKEN_RE.finditer(text, open_index):
        if token.group() == "{":
            depth += 1
        elif token.group() == "}":
            depth -= 1
            if depth == 0:
                return token.start()
    return -1
