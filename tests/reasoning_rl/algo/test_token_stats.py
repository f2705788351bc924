"""The token-statistics accumulator: sums and counts, reduced once, divided after."""

import math

import pytest
import torch

from reasoning_rl import distributed
from reasoning_rl.algo.token_stats import TokenStats


def test_a_token_mean_weighs_every_token_not_every_micro_batch():
    stats = TokenStats(("ratio/mean", "clip/low_fraction"))
    # Micro-batch 1: two rows, the second padded after one token. Micro-batch 2: one token.
    stats.add("ratio/mean", torch.tensor([[1.0, 2.0], [3.0, float("inf")]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    stats.add("ratio/mean", torch.tensor([[6.0]]), torch.ones(1, 1))
    stats.add("clip/low_fraction", torch.tensor([[True, False], [False, False]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    stats.add("clip/low_fraction", torch.tensor([[True]]), torch.ones(1, 1))
    means = stats.means()
    # (1 + 2 + 3 + 6) / 4 tokens = 3; the mean of the micro-batch means, (2 + 6) / 2 = 4, is not it.
    # The padded inf is never read.
    assert means["ratio/mean"] == 3.0
    assert means["clip/low_fraction"] == 0.5  # 2 clipped of 4 tokens


def test_a_mean_taken_over_a_micro_batch_weighs_its_tokens():
    stats = TokenStats(("kl/mean",))
    stats.add_mean("kl/mean", 0.5, 3)  # 3 tokens of mean 0.5: sum 1.5
    stats.add_mean("kl/mean", 2.0, 1)  # 1 token: sum 2
    assert stats.means() == {"kl/mean": pytest.approx(3.5 / 4)}


def test_no_token_is_nan_and_an_undeclared_name_is_refused():
    stats = TokenStats(("clip/value_fraction",))
    stats.add("clip/value_fraction", torch.ones(2, 3), torch.zeros(2, 3))  # no scorable token
    assert math.isnan(stats.means()["clip/value_fraction"])
    with pytest.raises(KeyError, match=r"'ratio/maen' was not declared; declared: \['clip/value_fraction'\]"):
        stats.add_mean("ratio/maen", 1.0, 1)


def test_the_ranks_sums_and_counts_are_reduced_together_before_dividing(monkeypatch):
    """Rank 0 holds 3 tokens of ratio 1, rank 1 one token of ratio 1 (sums 3 and 1): the global
    mean is (3 + 1) / (3 + 1) = 1. Dividing a rank's sum by the global count gave 3/4 and 1/4."""
    other_rank = [1.0, 1.0]  # rank 1's [sum, count]
    calls = []

    def sum_floats(values):
        calls.append(list(values))
        return [v + o for v, o in zip(values, other_rank)]

    monkeypatch.setattr(distributed, "sum_floats", sum_floats)
    stats = TokenStats(("ratio/mean",))
    stats.add("ratio/mean", torch.ones(1, 3), torch.ones(1, 3))
    assert stats.means() == {"ratio/mean": 1.0}
    assert calls == [[3.0, 3.0]]  # one reduction of every sum and count
