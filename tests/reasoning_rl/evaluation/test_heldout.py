"""Held-out Pass@K and Maj@K from the sampled completions, on hand-worked numbers."""

import pytest

from reasoning_rl.evaluation.heldout import HeldOutResult, k_values, pass_and_maj_at_k


def test_k_values_are_powers_of_two_and_n():
    assert k_values(1) == [1]
    assert k_values(4) == [1, 2, 4]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(64) == [1, 2, 4, 8, 16, 32, 64]


def test_pass_and_maj_at_k_by_hand():
    # Problem A: 1 of 4 right ("1"), the wrong answer "2" twice: the vote of all 4 picks "2" -> 0.
    # Problem B: 3 of 4 right ("5"): every vote of 4 picks "5" -> 1; pass@2 = 1 (a pair always holds a "5").
    correct = [[True, False, False, False], [True, True, True, False]]
    answers = [["1", "2", "2", "3"], ["5", "5", "5", "4"]]
    pass_at, maj_at = pass_and_maj_at_k(correct, answers)
    assert pass_at[1] == pytest.approx((1 / 4 + 3 / 4) / 2)
    assert pass_at[2] == pytest.approx(((1 - 3 / 6) + 1.0) / 2)  # A: 1 - C(3,2)/C(4,2)
    assert pass_at[4] == 1.0
    assert maj_at[1] == pass_at[1]  # the vote of one sample is that sample
    assert maj_at[4] == pytest.approx(0.5)


def test_samples_without_an_answer_do_not_vote():
    pass_at, maj_at = pass_and_maj_at_k([[False, False, True]], [[None, None, "7"]])
    assert maj_at[3] == 1.0  # the only answer wins the vote of all three
    assert pass_at[2] == pytest.approx(2 / 3)
    # Maj@2 is averaged over random orders: any pair holding the "7" votes for it, 2 of the 3 pairs.
    assert maj_at[2] == pytest.approx(2 / 3, abs=0.15)


def test_result_dict_carries_every_k():
    result = HeldOutResult(0.5, 0.25, 2, 4, pass_at={1: 0.25, 4: 1.0}, maj_at={1: 0.25, 4: 0.5})
    assert result.as_dict() == {"greedy_accuracy": 0.5, "sampled_accuracy": 0.25, "num_problems": 2,
                                "samples_per_problem": 4, "pass@1": 0.25, "pass@4": 1.0,
                                "maj@1": 0.25, "maj@4": 0.5}
