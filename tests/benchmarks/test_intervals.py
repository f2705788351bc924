"""Bootstrap intervals on hand-worked numbers (benchmarks/intervals.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.intervals import (
    Interval,
    as_matrix,
    average_interval,
    paired_difference,
    percentile_interval,
    replicate_means,
    score_interval,
)


def test_replicate_means_by_hand() -> None:
    values = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])  # 3 problems, 2 samples; avg@2 = (0.5+0+1)/3 = 0.5
    problem_idx = np.array([[0, 1, 2], [2, 2, 1]])  # replicate 0: the data itself; replicate 1: p2, p2, p1
    sample_idx = np.array([[[0, 1], [0, 1], [0, 1]],  # every sample once: 0.5
                           [[0, 0], [1, 1], [0, 0]]])  # p2 s0,s0 = 1; p2 s1,s1 = 1; p1 s0,s0 = 0 -> 2/3
    assert replicate_means(values, problem_idx, sample_idx).tolist() == pytest.approx([0.5, 2 / 3])
    # problem-level only: replicate 1 = (p2 + p2 + p1) / 3 = (1 + 1 + 0) / 3
    assert replicate_means(values, problem_idx, None).tolist() == pytest.approx([0.5, 2 / 3])
    # sample draw matters: p0 drawn twice, first with its wrong sample twice -> (0 + 1) / 2
    assert replicate_means(values, np.array([[0, 0]]), np.array([[[1, 1], [0, 0]]])).tolist() == [0.5]


def test_percentile_interval_by_hand() -> None:
    # 101 replicates 0.00, 0.01, ..., 1.00: the 2.5% quantile is 0.025, the 97.5% one 0.975 (linear interpolation)
    iv = percentile_interval(0.5, np.linspace(0, 1, 101))
    assert (iv.low, iv.high) == pytest.approx((0.025, 0.975))
    # 5 replicates [0, .2, .4, .6, .8], level 0.5: the 25% quantile sits at position 1 (0.2), the 75% at 3 (0.6)
    iv = percentile_interval(0.4, np.array([0.8, 0.0, 0.4, 0.2, 0.6]), level=0.5)
    assert (iv.value, iv.low, iv.high) == pytest.approx((0.4, 0.2, 0.6))


def test_all_right_or_all_wrong_has_no_width() -> None:
    assert score_interval([[True] * 4] * 10)[0] == Interval(1.0, 1.0, 1.0)
    assert score_interval([[False]] * 10)[0] == Interval(0.0, 0.0, 0.0)


def test_two_problems_one_right() -> None:
    # Resampling 2 problems from {0, 1}: the mean is 0 with p 1/4, 0.5 with p 1/2, 1 with p 1/4, so the
    # 2.5% and 97.5% quantiles are 0 and 1 (each end has 25% of the mass), and the value is 0.5.
    iv, reps = score_interval([[0], [1]], replicates=4000, seed=1)
    assert (iv.value, iv.low, iv.high) == (0.5, 0.0, 1.0)
    assert np.mean(reps == 0.5) == pytest.approx(0.5, abs=0.03)


def test_width_matches_the_binomial_standard_error() -> None:
    # 100 problems, 30 right, n = 1: the standard error is sqrt(0.3 * 0.7 / 100) = 0.0458, so the
    # 95% interval is about 0.30 +- 1.96 * 0.0458 = [0.21, 0.39].
    iv, reps = score_interval([[1]] * 30 + [[0]] * 70, replicates=4000, seed=0)
    assert reps.std() == pytest.approx(math.sqrt(0.3 * 0.7 / 100), rel=0.08)
    assert iv.low == pytest.approx(0.21, abs=0.02) and iv.high == pytest.approx(0.39, abs=0.02)


def test_sampling_noise_widens_avg_at_n() -> None:
    # Every problem has 2 of 4 samples right: problems are alike, only the samples vary. Resampling
    # samples gives a per-problem mean with variance 0.25 / 4, so avg@4 over 20 problems has a standard error
    # of sqrt(0.25 / 4 / 20) = 0.0559; a problems-only bootstrap would give width 0.
    iv, reps = score_interval([[1, 1, 0, 0]] * 20, replicates=4000, seed=0)
    assert iv.value == 0.5
    assert reps.std() == pytest.approx(math.sqrt(0.25 / 4 / 20), rel=0.1)


def test_ragged_sample_counts_fall_back_to_problem_means() -> None:
    assert as_matrix([[1, 0], [1]]).tolist() == [[0.5], [1.0]]


def test_suite_average_by_hand() -> None:
    # benchmark 1 replicates [0.2, 0.4], benchmark 2 [0.6, 1.0] -> average replicates [0.4, 0.7]
    iv = average_interval([0.3, 0.8], [np.array([0.2, 0.4]), np.array([0.6, 1.0])], level=0.0)
    assert iv.value == pytest.approx(0.55)
    assert iv.low == iv.high == pytest.approx(0.55)  # level 0: the median of [0.4, 0.7]


def test_paired_difference_by_hand() -> None:
    a = [[1], [0], [0], [1]]
    b = [[1], [1], [1], [1]]  # B fixes problems 1 and 2: d = [0, 1, 1, 0], mean 0.5
    iv, _ = paired_difference(a, b, replicates=2000)
    assert iv.value == 0.5
    assert 0.0 <= iv.low < 0.5 < iv.high <= 1.0


def test_pairing_removes_shared_problem_difficulty() -> None:
    # 50 problems: A solves the first 25, B the same 25 and one more. The paired difference is 1/50 = 0.02,
    # and every replicate's difference is >= 0 (B is never worse on any problem), so the interval is [0, ...]:
    # an unpaired interval of two scores near 0.5 would be about +-0.2 wide.
    a = [[1]] * 25 + [[0]] * 25
    b = [[1]] * 26 + [[0]] * 24
    iv, _ = paired_difference(a, b, replicates=2000)
    assert iv.value == pytest.approx(0.02)
    assert iv.low == 0.0 and iv.high <= 0.06
    assert not iv.excludes_zero


def test_clear_improvement_excludes_zero() -> None:
    a = [[0, 0]] * 30
    b = [[1, 0]] * 15 + [[1, 1]] * 15  # +0.75 on average, every problem better
    iv, _ = paired_difference(a, b)
    assert iv.value == pytest.approx(0.75)
    assert iv.excludes_zero and iv.low > 0.5
