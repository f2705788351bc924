"""String normalisation of a LaTeX answer, before any parsing.

Everything here is a cheap, pure string rewrite that keeps the meaning of an answer
and removes presentation: ``\\dfrac`` -> ``\\frac``, ``\\left(`` -> ``(``, ``\\!`` and
``\\quad`` spacing, ``\\text{...}`` wrappers, degree signs, a trailing full stop.
What an answer *is* (a number, a set, an equation) is decided later by
:mod:`rewards.math.parse`.
"""

from __future__ import annotations

import re

from rewards.math.braces import matching_brace

# Commands whose argument is shown as plain text: keep the argument, drop the command.
_TEXT_COMMANDS = (
    "text", "textbf", "textit", "textrm", "textnormal", "textsf", "texttt", "mbox", "mathrm",
    "mathbf", "mathit", "mathsf", "mathtt", "operatorname", "boldsymbol", "bm", "hbox", "emph",
)
_TEXT_RE = re.compile(r"\\(?:" + "|".join(_TEXT_COMMANDS) + r")\s*\{([^{}]*)\}")
# Spacing and sizing commands that carry no meaning in an answer.
_SPACING_RE = re.compile(
    r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|biggl|biggr|displaystyle|textstyle|limits)(?![a-zA-Z])"
    r"|\\[!,;:>]|\\q?quad(?![a-zA-Z])|\\(?:hspace|vspace)\*?\{[^{}]*\}|~"
)
_FRAC_ALIASES_RE = re.compile(r"\\[dtc]frac(?![a-zA-Z])")
# \frac12 -> \frac{1}{2}, \frac3{4} -> \frac{3}{4}, \frac{3}4 -> \frac{3}{4}
_FRAC_SHORT_RE = re.compile(r"\\frac\s*(\d|\{[^{}]*\})\s*(\d|\{[^{}]*\}|[a-zA-Z])")
_SQRT_SHORT_RE = re.compile(r"\\sqrt\s*(\d|[a-zA-Z](?![a-zA-Z]))")
_DEGREE_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![a-zA-Z])|\\degree(?![a-zA-Z])|°")
_RELATION_ALIASES: tuple[tuple[str, str], ...] = (
    (r"\leqslant", r"\le"), (r"\geqslant", r"\ge"), (r"\leq", r"\le"), (r"\geq", r"\ge"),
    (r"\neq", r"\ne"), ("<=", r"\le "), (">=", r"\ge "), ("!=", r"\ne "), ("≤", r"\le "),
    ("≥", r"\ge "), ("≠", r"\ne "), (r"\lt", "<"), (r"\gt", ">"), (r"\to", r"\rightarrow"),
)
# `\\frac` in text that was escaped twice (JSON or Python strings): only a double
# backslash directly followed by a command name, never a LaTeX line break `\\ `.
_DOUBLE_ESCAPED_RE = re.compile(r"(?<!\\)\\\\(?=[a-zA-Z]{2,})")


def undo_double_escaping(text: str) -> str:
    """Turn ``\\\\frac`` (a command escaped twice) back into ``\\frac``; also literal ``\\n``."""
    if "\\\\" in text:
        text = _DOUBLE_ESCAPED_RE.sub(r"\\", text)
    if "\\n" in text:
        text = re.sub(r"\\n(?![a-zA-Z])", "\n", text)
    return text


def strip_math_delimiters(text: str) -> str:
    """Remove ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` markers anywhere in ``text``."""
    text = re.sub(r"\\[()\[\]]", " ", text)
    text = text.replace("\\$", " ")  # an escaped dollar is a currency sign
    return text.replace("$", " ")


def normalize(answer: str) -> str:
    """Canonical string form of one extracted answer (LaTeX or plain).

    The result keeps LaTeX commands that matter (``\\frac``, ``\\sqrt``, ``\\pi``,
    ``\\cup``, ``\\le``), turns presentation variants into one spelling and
    removes spacing, so that two answers written the same way compare equal as
    strings without any parsing.
    """
    s = undo_double_escaping(answer)
    s = strip_math_delimiters(s)
    s = s.replace("\\boxed", "").replace("\\fbox", "")
    s = _FRAC_ALIASES_RE.sub(r"\\frac", s)
    s = re.sub(r",\\!\s*(?=\d{3})", ",", s)  # 11,\! 111 is a thousands separator
    s = _SPACING_RE.sub(" ", s)
    s = re.sub(r"(?<!\\)\\ ", " ", s).replace("\\%", "%")
    s = re.sub(r"\{\s*,\s*\}", ",", s)  # 14{,}916
    for _ in range(3):  # nested \text{\textbf{..}}
        new = _TEXT_RE.sub(r" \1 ", s)
        if new == s:
            break
        s = new
    s = _DEGREE_RE.sub(" ", s)
    for old, new in _RELATION_ALIASES:
        s = s.replace(old, new)
    s = re.sub(r"\\(le|ge|ne)(?![a-zA-Z])", r" \\\1 ", s)
    s = _FRAC_SHORT_RE.sub(lambda m: rf"\frac{_brace(m.group(1))}{_brace(m.group(2))}", s)
    s = _SQRT_SHORT_RE.sub(r"\\sqrt{\1}", s)
    s = s.replace("\\infty", "\\infty ").replace("+\\infty", "\\infty")
    s = re.sub(r"\s+", " ", s).strip()
    s = s.strip(" ,;:")
    s = re.sub(r"^\.(?!\d)|\.$", "", s).strip()
    # A lone pair of braces around the whole answer: {5} -> 5 (a set is written \{5\}).
    while s.startswith("{") and s.endswith("}") and matching_brace(s, 0) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def compact(s: str) -> str:
    """``s`` without any whitespace: the key for plain string comparison."""
    return re.sub(r"\s+", "", s)


def _brace(token: str) -> str:
    return token if token.startswith("{") else "{" + token + "}"
