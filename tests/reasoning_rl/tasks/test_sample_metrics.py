"""Per-problem pass@k, majority vote and maj@k on hand-worked cases (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest

from reasoning_rl.tasks.sample_metrics import maj_at_k, majority_vote, pass_at_k, reports_answers, vote_answer
from tests.conftest import rounding_atol


def _product_atol(n: int) -> float:
    """pass@k is 1 minus a product of at most n factors (1 - k / i), each rounded once, in float64: 2n + 1
    roundings at scale 1 (tests/conftest.py's rule)."""
    import torch

    return rounding_atol(1.0, terms=2 * n + 1, dtype=torch.float64)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        # n=5, c=2, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4  (= c/n, pass@1 is plain accuracy)
        (5, 2, 1, 0.4),
        # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
        (5, 2, 2, 0.7),
        # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
        (4, 1, 2, 0.5),
        # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 11/12
        (10, 3, 5, 11 / 12),
        # n-c < k: every 4-subset of 5 samples with 2 correct holds a correct one
        (5, 2, 4, 1.0),
        # no correct sample: 0 whatever k
        (8, 0, 3, 0.0),
        # all correct
        (3, 3, 1, 1.0),
    ],
)
def test_pass_at_k_hand_worked(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=_product_atol(n))


def test_pass_at_k_matches_binomials_where_they_are_small() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=_product_atol(n))


def test_pass_at_k_is_stable_for_large_n() -> None:
    # C(1000, 500) overflows a float; the product form does not. n=1000, c=1, k=500:
    # 1 - C(999,500)/C(1000,500) = 1 - (1000-500)/1000 = 0.5
    assert pass_at_k(1000, 1, 500) == pytest.approx(0.5)


def test_pass_at_k_rejects_impossible_arguments() -> None:
    with pytest.raises(ValueError, match="at least k=4"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(3, 4, 1)


def test_majority_vote_plain_counts() -> None:
    # "4" x3, "5" x2: "4" wins, first "4" is sample 1
    assert majority_vote(["5", "4", "4", "5", "4"]) == 1


def test_majority_vote_ties_go_to_the_first_answer_seen() -> None:
    # "7" x2 (first at 0), "3" x2 (first at 1): tie, "7" came first
    assert majority_vote(["7", "3", "3", "7"]) == 0


def test_majority_vote_ignores_missing_answers() -> None:
    # None x3 does not vote; "2" x1 wins
    assert majority_vote([None, None, "2", None]) == 2
    assert majority_vote([None, None]) is None


def test_majority_vote_merges_equivalent_answers() -> None:
    # as strings: "0.5" x1, "\frac{1}{2}" x1, "1/2" x1, "3" x2 -> "3" would win 2 to 1;
    # with the equivalence the three halves form one group of 3 and win 3 to 2.
    halves = {"0.5", "\\frac{1}{2}", "1/2"}
    answers = ["3", "0.5", "\\frac{1}{2}", "3", "1/2"]
    assert majority_vote(answers) == 0
    assert majority_vote(answers, lambda a, b: a in halves and b in halves) == 1


def test_maj_at_k_uses_the_first_k_samples() -> None:
    answers = ["1", "2", "2", "1", "1"]
    correct = [1.0, 0.0, 0.0, 1.0, 1.0]
    # first 3: "2" x2 beats "1" x1 -> the majority answer is wrong: 0
    assert maj_at_k(answers, correct, 3) == 0.0
    # all 5: "1" x3 beats "2" x2 -> right: 1
    assert maj_at_k(answers, correct, 5) == 1.0
    # k=1 is the first sample's verdict
    assert maj_at_k(answers, correct, 1) == 1.0
    # nothing extracted: 0
    assert maj_at_k([None, None], [0.0, 0.0], 2) == 0.0


@pytest.mark.parametrize(("extracted", "completion", "scored", "reports", "vote"), [
    ("7", "so the answer is \\boxed{7}", True, True, "7"),              # the verifier's extracted answer
    (None, "no boxed answer", True, True, None),                        # math: ok(0, extracted=None): no vote
    (None, "  the answer\n is  7 ", True, False, "the answer is 7"),   # plugin without answer field: the text
    (None, "no answer here", False, False, None),                       # not scored (unscorable, timeout)
])
def test_vote_answer(extracted, completion, scored, reports, vote) -> None:
    assert vote_answer(extracted, completion, scored=scored, reports_answers=reports) == vote


@pytest.mark.parametrize(("info", "reports"), [({"extracted": None, "gold": "1"}, True), ({"pred": "3"}, True),
                                               ({"reason": "x"}, False), (None, False)])
def test_reports_answers(info, reports) -> None:
    assert reports_answers(info) is reports
