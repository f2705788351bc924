"""Advantage estimators on hand-worked numbers."""

import math

import pytest
import torch

from reasoning_rl.algo import compute_advantages, grpo_advantages, rloo_advantages, zero_std_fraction

pytestmark = pytest.mark.numerics

nan = math.nan


def test_paper_worked_example():
    # G = 4, r = [1, 0, 1, 0]: mean 0.5, population std sqrt(4 * 0.25 / 4) = 0.5
    # A = (r - 0.5) / 0.5 = [+1, -1, +1, -1]
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), eps=0.0)
    assert adv.tolist() == [[1.0, -1.0, 1.0, -1.0]]
    # with the default eps = 1e-6: 0.5 / (0.5 + 1e-6) = 1 / (1 + 2e-6), exactly that up to float32's rounding
    assert grpo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))[0].tolist() == pytest.approx([1 / (1 + 2e-6), -1 / (1 + 2e-6)] * 2)


def test_unbiased_std():
    # r = [1, 0, 1, 0]: unbiased std = sqrt(1 / 3) = 0.57735; A = +-0.5 / 0.57735 = +-0.86603
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), eps=0.0, std="unbiased")
    a = 0.5 / math.sqrt(1 / 3)
    assert adv[0].tolist() == pytest.approx([a, -a, a, -a])


def test_no_std_scaling_is_dr_grpo():
    # r = [3, 1]: mean 2 -> A = [1, -1] without division
    assert grpo_advantages(torch.tensor([[3.0, 1.0]]), std="none").tolist() == [[1.0, -1.0]]
    assert compute_advantages(torch.tensor([[3.0, 1.0]]), "dr_grpo").tolist() == [[1.0, -1.0]]


def test_batch_std():
    # groups [1, 0] and [3, 3]: centred [0.5, -0.5] and [0, 0]
    # batch population std of {1, 0, 3, 3}: mean 1.75, var (0.5625 + 3.0625 + 1.5625 * 2) / 4 = 1.6875
    adv = grpo_advantages(torch.tensor([[1.0, 0.0], [3.0, 3.0]]), eps=0.0, std="batch")
    s = math.sqrt(1.6875)
    assert adv.flatten().tolist() == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0])


def test_equal_rewards_give_zero_advantage():
    adv = grpo_advantages(torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert adv.abs().max() == 0.0
    assert zero_std_fraction(torch.tensor([[1.0, 1.0], [1.0, 0.0]])) == 0.5


def test_unscorable_samples_are_left_out_and_get_zero():
    # r = [1, None, 0, 0]: stats over [1, 0, 0]: mean 1/3, population std sqrt(2/9) = 0.4714
    adv = grpo_advantages(torch.tensor([[1.0, nan, 0.0, 0.0]]), eps=0.0)[0]
    std = math.sqrt(2 / 9)
    assert adv.tolist() == pytest.approx([(2 / 3) / std, 0.0, (-1 / 3) / std, (-1 / 3) / std])


def test_rloo():
    # r = [1, 0, 1, 0]: baseline for item 0 = (0 + 1 + 0) / 3 = 1/3 -> A_0 = 2/3
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]))
    assert adv[0].tolist() == pytest.approx([2 / 3, -2 / 3, 2 / 3, -2 / 3])


def test_unknown_estimator():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages(torch.zeros(1, 2), "ppo")
