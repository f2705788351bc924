"""Format reward and DAPO's soft overlong penalty."""

import pytest

from rewards import get_verifier, overlong_penalty


@pytest.mark.parametrize(
    "style, text, expected",
    [
        ("think_answer", "<think>2+2 is 4</think> <answer>4</answer>", 1.0),
        ("think_answer", "<think>no answer tag</think>", 0.0),
        ("think_answer", "junk <think>a</think><answer>4</answer>", 0.0),  # must start with <think>
        ("answer_tag", "so <answer>4</answer>", 1.0),
        ("boxed", r"the answer is \boxed{4}", 1.0),
        ("boxed", "the answer is 4", 0.0),
    ],
)
def test_format_reward(style, text, expected):
    assert get_verifier("format", style=style)(text, None).score == expected


def test_format_custom_pattern():
    assert get_verifier("format", pattern=r"^Answer: \d+$")("Answer: 12", None).score == 1.0


def test_format_unknown_style():
    with pytest.raises(ValueError, match="unknown format style"):
        get_verifier("format", style="xml")


@pytest.mark.parametrize(
    "length, expected",
    [
        (0, 0.0),
        (12, 0.0),     # L_max - buffer = 16 - 4 = 12: still free
        (13, -0.25),   # (12 - 13) / 4
        (14, -0.5),
        (16, -1.0),    # (12 - 16) / 4 at L_max
        (17, -1.0),    # beyond L_max
    ],
)
def test_overlong_penalty(length, expected):
    assert overlong_penalty(length, max_length=16, buffer=4) == pytest.approx(expected)


def test_overlong_bad_buffer():
    with pytest.raises(ValueError):
        overlong_penalty(1, max_length=4, buffer=0)
