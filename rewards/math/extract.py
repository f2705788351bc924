"""Find the final answer in a model completion or a dataset's reference solution.

Extraction is a separate step from grading (as in Math-Verify's ``parse`` then
``verify``), with separate settings for the two sides because they differ:

* the **gold** side (:class:`GoldExtraction`) is a dataset field -- a bare answer
  (``"$\\frac{1}{3}$"``, ``"42"``) or a worked solution ending in ``\\boxed{}`` or
  ``#### 42``; when no marker is found the whole field is the answer.
* the **prediction** side (:class:`PredExtraction`) is free model text; without an
  explicit marker it falls back to the last ``$...$`` formula and then to the last
  number -- fallbacks that ``strict=True`` switches off.

Markers, from most to least explicit: ``\\boxed{}``/``\\fbox{}`` (nested braces;
several boxes joined by "and" or commas form one list answer), ``<answer>...</answer>``,
"The (final) answer is ...", "Final answer: ...", GSM8K's ``#### 42``. When several
markers occur, the one that starts last in the text wins (models restate answers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewards.math.braces import matching_brace
from rewards.math.normalize import undo_double_escaping


@dataclass(frozen=True)
class ExtractionConfig:
    """Which answer markers to look for, shared by both sides."""

    boxed: bool = True
    """Use the last ``\\boxed{...}`` / ``\\fbox{...}``."""
    join_boxed: bool = True
    """Several boxes separated only by "and", "or", commas or spacing are one list answer."""
    answer_tags: bool = True
    """Use the content of the last ``<answer>...</answer>``."""
    answer_phrases: bool = True
    """Use what follows the last "answer is" / "Final answer:"."""
    gsm8k_marker: bool = True
    """Use what follows ``####`` (GSM8K solutions)."""
    max_chars: int = 200_000
    """Look only at the last ``max_chars`` characters (answers come at the end)."""
    unit_label: bool = True
    """An answer that is a number followed by a label in parentheses (ASDiv's ``9 (apples)``,
    ``2.5 (square feet)``) is the number: the label names what is counted."""


@dataclass(frozen=True)
class GoldExtraction(ExtractionConfig):
    """Reference side: without a marker, the whole field is the answer."""

    whole_text: bool = True
    """With no marker, take the whole text (math delimiters removed) as the answer."""


@dataclass(frozen=True)
class PredExtraction(ExtractionConfig):
    """Model side: after the markers, fall back to the last formula, then the last number."""

    strict: bool = False
    """Switch off both fallbacks below: only explicit markers (or an answer-only text) count."""
    last_math: bool = True
    """Fall back to the last ``$...$``, ``\\(...\\)`` or ``\\[...\\]`` formula."""
    last_number: bool = True
    """Fall back to the last number in the text (not one glued to letters, like ``K2A``)."""


GOLD = GoldExtraction()
PRED = PredExtraction()
STRICT_PRED = PredExtraction(strict=True)

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*(\{|\s)")
_TAGS_RE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_PHRASE_RE = re.compile(r"\banswer\b[*_\s]*(?:\s+is|:)+[*_\s]*:?", re.IGNORECASE)
_GSM8K_RE = re.compile(r"####\s*([^\n]+)")
_EMPTY_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{\s*\}")
_MATH_RE = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z\d.])[-+]?(?:\d[\d,]*(?:\.\d+)?(?:/\d+(?![\d,]))?|\.\d+)(?:\s*(?:%|\\%|percent\b))?"
)
# Chat-template markers: anything after the end of the model's turn is not its answer.
_END_OF_TURN_RE = re.compile(r"<\|(?:im_end|im_start|endoftext|eot_id|end_of_text)\|>")
# Text allowed between two boxes that form one answer: "and", "or", punctuation,
# spacing commands, math delimiters, short \text{...} connectives.
_JOIN_GAP_RE = re.compile(r"^[\s,;+$.:()\\\[\]]*$")
_WORD_RE = re.compile(r"[A-Za-z]+")
_PROSE_RE = re.compile(r"[A-Za-z][A-Za-z\s,.'!-]*")
_UNIT_LABEL_RE = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?)\s*\(\s*[A-Za-z][A-Za-z\s'.-]*\)")


def extract_answer(text: str, config: ExtractionConfig = PRED) -> str | None:
    """The final answer in ``text`` as a string (still LaTeX), or ``None`` when none is found.

    ``config`` is :data:`PRED` (default), :data:`STRICT_PRED` or :data:`GOLD`, or your own
    :class:`PredExtraction` / :class:`GoldExtraction`.
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    end_of_turn = _END_OF_TURN_RE.search(text)
    if end_of_turn is not None and text[: end_of_turn.start()].strip():
        text = text[: end_of_turn.start()]
    text = undo_double_escaping(text[-config.max_chars :]).strip()
    if not text:
        return None
    found = _last_marker(text, config)
    if found is not None:
        answer = found or None
    elif isinstance(config, GoldExtraction):
        answer = _plain(text) if config.whole_text else None
    else:
        answer = _fallback(text, config if isinstance(config, PredExtraction) else PRED)
    if answer is not None and config.unit_label and (labelled := _UNIT_LABEL_RE.fullmatch(answer)):
        return labelled.group(1)
    return answer


def _last_marker(text: str, config: ExtractionConfig) -> str | None:
    """Content of the marker that starts last in ``text`` (``None`` when there is none)."""
    candidates: list[tuple[int, str]] = []
    if config.boxed:
        boxed = _boxed(text, config.join_boxed)
        if boxed is not None:
            candidates.append(boxed)
    if config.answer_tags and "<answer>" in text.lower():
        matches = list(_TAGS_RE.finditer(text))
        if matches:
            m = matches[-1]
            inner = _last_marker(m.group(1), ExtractionConfig(answer_tags=False))
            candidates.append((m.start(), inner if inner is not None else m.group(1).strip()))
    weak: list[tuple[int, str]] = []
    if config.answer_phrases:
        # The last phrase that names something: "The final answer is within \boxed{}." (the prompt's
        # instruction echoed, its box empty) names nothing, so the "answer is 48" before it counts.
        for m in reversed(list(_PHRASE_RE.finditer(text))):
            answer = _phrase_answer(text[m.end() :])
            if answer.strip():
                # "... so our answer is correct": words only, used when nothing else is found
                (weak if _PROSE_RE.fullmatch(answer) else candidates).append((m.start(), answer))
                break
    if config.gsm8k_marker:
        matches = list(_GSM8K_RE.finditer(text))
        if matches:
            candidates.append((matches[-1].start(), matches[-1].group(1).strip()))
    candidates = candidates or weak
    if not candidates:  # an empty \boxed{} alone is still a marker: one that holds no answer
        return "" if config.boxed and _EMPTY_BOX_RE.search(text) else None
    return max(candidates, key=lambda c: c[0])[1].strip()


def _boxed(text: str, join: bool) -> tuple[int, str] | None:
    """(start, content) of the last non-empty box, joined with the boxes just before it when
    only connectives separate them (``\\boxed{1} and \\boxed{2}`` -> ``1, 2``)."""
    boxes: list[tuple[int, int, str]] = []  # (start, end, content)
    for m in _BOX_RE.finditer(text):
        if m.group(1) == "{":
            end = matching_brace(text, m.end() - 1)
            if end < 0:  # unclosed: take the rest of the text
                boxes.append((m.start(), len(text), text[m.end() :]))
                continue
            if text[m.end() : end].strip():  # an empty \boxed{} (an echoed instruction) holds no answer
                boxes.append((m.start(), end + 1, text[m.end() : end]))
        else:  # \boxed 5
            token = re.match(r"\s*([^\s$.,]+)", text[m.end() :])
            if token:
                boxes.append((m.start(), m.end() + token.end(), token.group(1)))
    if not boxes:
        return None
    start, _, content = boxes[-1]
    parts = [content]
    if join:
        for later, earlier in zip(reversed(boxes[1:]), reversed(boxes[:-1])):
            if not _is_connective(text[earlier[1] : later[0]]):
                break
            start = earlier[0]
            parts.insert(0, earlier[2])
    return start, ", ".join(p.strip() for p in parts)


def _is_connective(gap: str) -> bool:
    gap = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r" \1 ", gap)
    gap = re.sub(r"\\q?quad|\\[,;!]", " ", gap)
    words = _WORD_RE.findall(gap)
    if not words:
        return _JOIN_GAP_RE.match(gap) is not None or len(gap.strip()) <= 12
    lowered = [w.lower() for w in words]
    return len(words) <= 5 and ("and" in lowered or "or" in lowered)


def _phrase_answer(rest: str) -> str:
    """The answer in the text after "answer is": up to the end of the sentence, with
    leading prose ("The largest $n$ is 34") cut at the last " is "."""
    rest = rest.lstrip()
    end = len(rest)
    for m in re.finditer(r"\.(?:\s|$)|\n\s*\n|\bI hope\b|<\|", rest):
        # A sentence ends at a full stop outside math.
        if rest[: m.start()].count("$") % 2 == 0:
            end = m.start()
            break
    phrase = re.sub(r'^(?:\\?["\s*_])+|(?:\\?["\s*_])+$', "", rest[:end])  # quotes, **bold**
    boxed = _boxed(phrase, join=True)
    if boxed is not None:
        return boxed[1]
    if _BOX_RE.search(phrase):  # only empty boxes: the phrase points at no answer
        return ""
    cut = [m.end() for m in re.finditer(r"\s(?:is|are|was|equals)\s", _MATH_RE.sub(_blank, phrase))]
    if cut:
        phrase = phrase[cut[-1] :].strip()
    outside = _MATH_RE.sub(" ", phrase)
    if len([w for w in _WORD_RE.findall(outside) if len(w) > 1]) <= 3:
        return phrase
    inner = _fallback(phrase, PRED)
    return inner if inner is not None else phrase


def _plain(text: str) -> str:
    """The whole text as the answer."""
    return text.strip()


def _fallback(text: str, config: PredExtraction) -> str | None:
    """No marker: a text that is only a formula is the answer; else the last formula
    or the last number, whichever comes last (unless strict)."""
    maths = list(_MATH_RE.finditer(text))
    if maths and not _MATH_RE.sub("", text).strip(" .,;:\n"):
        return " ".join(next(g for g in m.groups() if g is not None).strip() for m in maths)
    if _is_bare_answer(text):
        return _plain(text)
    if config.strict:
        return None
    candidates: list[tuple[int, str]] = []
    if config.last_math and maths:
        m = maths[-1]
        candidates.append((m.start(), next(g for g in m.groups() if g is not None)))
    if config.last_number:
        outside = _MATH_RE.sub(_blank, text)
        numbers = list(_NUMBER_RE.finditer(outside))
        if numbers:
            n = numbers[-1]
            value = n.group(0).rstrip(",")
            candidates.append((n.start(), value))
    if not candidates:
        return text.strip() if len(text) <= 40 and len(_WORD_RE.findall(text)) <= 4 else None
    return max(candidates, key=lambda c: c[0])[1].strip()


_UNIT_WORDS = frozenset({"percent", "percentage", "pct", "and", "or"})
# SymPy's plain-text names are not prose: `pi/2`, `-1 + exp(16)` are bare answers (Math-Verify#69).
_MATH_NAMES = frozenset({"pi", "exp", "sin", "cos", "tan", "log", "ln", "sqrt"})


def _is_bare_answer(text: str) -> bool:
    """A short text with no prose words outside formulas and LaTeX commands: the
    whole text is the answer (``-\\frac{10}{9}``, ``7,425,000``, ``28 pct``)."""
    if len(text) > 300:
        return False
    outside = _MATH_RE.sub(" ", text)
    outside = re.sub(r"\\[a-zA-Z]+(?:\{[^{}]*\})*", " ", outside)
    outside = re.sub(r"(?<=[\d)])(?:and|or)(?=[A-Z(\\])", " ", outside)  # `x=1orx=2`, spaces lost
    words = [w for w in _WORD_RE.findall(outside)
             if len(w) > 1 and w.lower() not in _UNIT_WORDS and w not in _MATH_NAMES]
    return not words


def _blank(m: re.Match[str]) -> str:
    """Replace a match by spaces, keeping the positions of the rest of the text."""
    return " " * len(m.group(0))
