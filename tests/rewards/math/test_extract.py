"""Answer extraction: (text, config, expected answer) tables."""

from __future__ import annotations

import pytest

from rewards.math import GOLD, PRED, STRICT_PRED, extract_answer

PRED_CASES = [
    # \boxed / \fbox, nested braces, the last one wins
    (r"so $x = \boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"first \boxed{1}, then after checking \boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),
    (r"\fbox{42}", "42"),
    (r"\boxed{\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}}", r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"),
    (r"\boxed 5", "5"),
    # several boxes joined by connectives are one list answer; prose between them is not
    (r"\boxed{1} and \boxed{2}", "1, 2"),
    (r"$\boxed{1}\boxed{2}$", "1, 2"),
    (r"\boxed{(2, 2)} \quad \text{and} \quad \boxed{(6, 2)}", "(2, 2), (6, 2)"),
    (r"\boxed{1} no no no no no \boxed{2}", "2"),
    # <answer> tags
    ("<think>long</think><answer>42</answer>", "42"),
    (r"<answer>the value is \boxed{7}</answer>", "7"),
    # an empty \boxed{} (the prompt's instruction echoed) holds no answer; an answer stated before it counts
    # (SmolLM2-135M-Instruct on GSM8K test problem 48, greedy: the last two sentences of its completion)
    ("So, the answer is 48.\n\nThe final answer is within \\boxed{}.", "48"),
    (r"\boxed{7}, so put your final answer within \boxed{}.", "7"),
    (r"The final answer is within \boxed{}.", None),
    (r"\boxed{}", None),
    # phrases
    ("The answer is 17.", "17"),
    ("Final answer: $3\\sqrt{2}$", "$3\\sqrt{2}$"),
    ("Final Answer: The final answer is $28 \\%$. I hope it is correct.", "$28 \\%$"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("**Final Answer:** 18", "18"),                       # markdown bold
    (r"so $\boxed{44}$. Indeed our answer is correct.", "44"),  # words only: a weak marker
    ("The answer is Evelyn.", "Evelyn"),                  # ... still used when it is the only one
    (r"\boxed{255} ... Final Answer: The final answer is $10,455$. I hope it is correct.", "$10,455$"),
    # GSM8K
    ("She pays 3 * 4 = <<3*4=12>>12 dollars.\n#### 12", "12"),
    # formula-only texts and $ / \( \) / \[ \] wrapping
    ("$x \\in [-2,7]$", "x \\in [-2,7]"),
    ("\\( \\frac{1}{3} \\)", "\\frac{1}{3}"),
    ("Answer \\[ 9 \\]", "9"),
    ("Therefore $x \\geq 5$ is the solution.", "x \\geq 5"),
    # bare answers are taken whole
    ("-\\frac{10}{9}", "-\\frac{10}{9}"),
    ("7,425,000", "7,425,000"),
    ("28 pct", "28 pct"),
    # last-number fallback, never a number glued to letters
    ("the number is not 10 which is 1,000.99€", "1,000.99"),
    ("so the probability that Alice wins is 2/3.", "2/3"),
    ("the code is AZYUK2A, sorry", None),  # a digit inside a word is not a number
    # chat-template markers end the model's turn
    ("... is 2/3. <|im_start|>user what is 5+5? The answer is 10", "2/3"),
    # double-escaped commands
    (r"$\\boxed{\\frac{1}{2}}$", r"\frac{1}{2}"),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), PRED_CASES)
def test_pred_extraction(text: str, expected: str | None) -> None:
    assert extract_answer(text, PRED) == expected


STRICT_CASES = [
    ("the result is 10 apples and 12 pears", None),  # no marker: nothing in strict mode
    ("Therefore $x = 5$ works.", None),
    (r"so \boxed{5}", "5"),
    ("$\\frac{1}{3}$", "\\frac{1}{3}"),  # a formula-only text is an answer, even strict
    ("#### 7", "7"),
]


@pytest.mark.parametrize(("text", "expected"), STRICT_CASES)
def test_strict_extraction_has_no_fallbacks(text: str, expected: str | None) -> None:
    assert extract_answer(text, STRICT_PRED) == expected


GOLD_CASES = [
    ("42", "42"),
    ("$\\frac{1}{3}$", "$\\frac{1}{3}$"),  # the whole field (delimiters go at normalisation)
    ("$1$ and $2$ and $3$", "$1$ and $2$ and $3$"),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "72"),
    (r"Thus the answer is $\boxed{(3, \frac{\pi}{2})}$.", r"(3, \frac{\pi}{2})"),
    ("the midpoints form a regular hexagon", "the midpoints form a regular hexagon"),
    ("   ", None),
]


@pytest.mark.parametrize(("text", "expected"), GOLD_CASES)
def test_gold_extraction(text: str, expected: str | None) -> None:
    assert extract_answer(text, GOLD) == expected


WEIRD = [None, 42, "}{", "\\boxed{", "\\boxed{{{{", "$$$$", "\x00\x01", pytest.param("a" * 100_000, id="long")]


@pytest.mark.parametrize("weird", WEIRD)
def test_extraction_never_raises(weird: object) -> None:
    result = extract_answer(weird)  # type: ignore[arg-type]
    assert result is None or isinstance(result, str)
