"""Benchmark-level metrics (accuracy, standard errors) on hand-worked cases; the per-problem
pass@k / maj@k are tested in tests/reasoning_rl/tasks/test_sample_metrics.py."""

from __future__ import annotations

import math

import pytest

import benchmarks.metrics
from benchmarks.metrics import accuracy, mean_and_stderr
from reasoning_rl.tasks import sample_metrics


def test_accuracy_is_mean_score() -> None:
    # 3 of 4 samples correct: 3/4
    assert accuracy([1.0, 0.0, 1.0, 1.0]) == 0.75


def test_mean_and_stderr_hand_worked() -> None:
    # values 1, 0, 1, 0: mean 0.5; sample variance = (4 * 0.25) / 3 = 1/3;
    # stderr = sqrt(1/3 / 4) = sqrt(1/12) = 0.288675...
    m = mean_and_stderr([1, 0, 1, 0])
    assert m.value == 0.5
    assert m.stderr == pytest.approx(math.sqrt(1 / 12))
    assert m.num_problems == 4
    assert math.isnan(mean_and_stderr([1.0]).stderr)


def test_the_harness_scores_problems_with_the_task_scoring_functions() -> None:
    """One definition of pass@k / maj@k / the vote, shared by training and the harness."""
    for name in sample_metrics.__all__:
        assert getattr(benchmarks.metrics, name) is getattr(sample_metrics, name)
