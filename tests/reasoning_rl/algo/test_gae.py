"""PPO's per-token math (reasoning_rl.algo.gae) on hand-worked numbers."""

import math

import pytest
import torch

from reasoning_rl.algo.gae import (
    clipped_value_loss,
    explained_variance,
    gae_advantages,
    kl_penalized_rewards,
    whiten,
)
from tests.conftest import assert_close_up_to_rounding

pytestmark = pytest.mark.numerics

REWARDS = torch.tensor([[0.0, 0.0, 1.0]])
VALUES = torch.tensor([[0.5, 0.2, 0.4]])
FULL = torch.ones(1, 3)


def test_gamma_1_lambda_1_returns_are_the_rewards_to_go():
    adv, ret = gae_advantages(REWARDS, VALUES, FULL, gamma=1.0, lam=1.0)
    # reward-to-go of [0, 0, 1] is [1, 1, 1]; A_t = G_t - V_t = [1 - 0.5, 1 - 0.2, 1 - 0.4]
    assert ret[0].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert adv[0].tolist() == pytest.approx([0.5, 0.8, 0.6])


def test_lambda_0_is_the_one_step_td_error():
    adv, ret = gae_advantages(REWARDS, VALUES, FULL, gamma=1.0, lam=0.0)
    # delta_0 = 0 + V_1 - V_0 = 0.2 - 0.5 = -0.3
    # delta_1 = 0 + V_2 - V_1 = 0.4 - 0.2 = +0.2
    # delta_2 = 1 + 0   - V_2 = 1 - 0.4   = +0.6   (terminal: no value after the last token)
    assert adv[0].tolist() == pytest.approx([-0.3, 0.2, 0.6])
    # R_t = A_t + V_t = [0.2, 0.4, 1.0]: the one-step bootstrapped targets r_t + V_{t+1}
    assert ret[0].tolist() == pytest.approx([0.2, 0.4, 1.0])


def test_gamma_and_lambda_discount():
    adv, ret = gae_advantages(REWARDS, VALUES, FULL, gamma=0.9, lam=0.5)
    # delta = [0 + 0.9*0.2 - 0.5, 0 + 0.9*0.4 - 0.2, 1 - 0.4] = [-0.32, 0.16, 0.6]
    # gamma*lam = 0.45:  A_2 = 0.6
    #                    A_1 = 0.16 + 0.45*0.6   = 0.43
    #                    A_0 = -0.32 + 0.45*0.43 = -0.1265
    assert adv[0].tolist() == pytest.approx([-0.1265, 0.43, 0.6])
    assert ret[0].tolist() == pytest.approx([-0.1265 + 0.5, 0.43 + 0.2, 0.6 + 0.4])


def test_padding_is_ignored_and_ends_the_episode():
    # Row 0: two real tokens then padding holding garbage that must not leak in.
    rewards = torch.tensor([[0.0, 1.0, 99.0, 99.0], [0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 7.0, -3.0], [0.1, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    # row 0 alone: reward-to-go [1, 1], minus V [0.5, 0.2] -> [0.5, 0.8]; 0 on padding
    assert adv[0].tolist() == pytest.approx([0.5, 0.8, 0.0, 0.0])
    assert ret[0].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    # the same row without the padding gives the same numbers
    adv_short, _ = gae_advantages(rewards[:1, :2], values[:1, :2], mask[:1, :2], 1.0, 1.0)
    assert adv_short[0].tolist() == pytest.approx([0.5, 0.8])
    # row 1 is untouched by row 0's padding: reward-to-go 1 everywhere
    assert ret[1].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_a_masked_hole_is_skipped_not_a_step():
    # [real, hole, real]: the hole passes V and A of the token after it back to the first one.
    rewards = torch.tensor([[0.0, 5.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 0.4]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    adv, _ = gae_advantages(rewards, values, mask, gamma=1.0, lam=0.0)
    # delta_2 = 1 - 0.4 = 0.6; delta_0 = 0 + V_2 - V_0 = 0.4 - 0.5 = -0.1 (hole's 9.0 and 5.0 unseen)
    assert adv[0].tolist() == pytest.approx([-0.1, 0.0, 0.6])


def test_kl_penalized_rewards():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    scores = torch.tensor([1.0, 0.5])
    r = kl_penalized_rewards(old, ref, scores, mask, beta=0.1)
    # row 0: -0.1 * (old - ref) = -0.1 * [0.5, -1.0, 0.0] = [-0.05, 0.1, 0]; + 1.0 on the last token
    assert r[0].tolist() == pytest.approx([-0.05, 0.1, 1.0])
    # row 1: one token: -0.1 * (-1 + 3) + 0.5 = -0.2 + 0.5 = 0.3; padding stays 0
    assert r[1].tolist() == pytest.approx([0.3, 0.0, 0.0])
    # beta = 0 needs no reference: the score on the last token only
    assert kl_penalized_rewards(old, None, scores, mask, beta=0.0)[0].tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="reference"):
        kl_penalized_rewards(old, None, scores, mask, beta=0.1)


def test_value_clipping_both_sides():
    old = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    returns = torch.tensor([[2.0, 0.0, 2.0, 1.05]])
    values = torch.tensor([[1.5, 0.5, 0.5, 1.1]])
    loss, clipped = clipped_value_loss(values, old, returns, clip=0.2)
    # token 0: V moved up 0.5 toward R=2 -> V_clip = 1.2: max((1.5-2)^2, (1.2-2)^2) = max(0.25, 0.64) -> 0.32
    # token 1: V moved down 0.5 toward R=0 -> V_clip = 0.8: max((0.5-0)^2, (0.8-0)^2) = max(0.25, 0.64) -> 0.32
    # token 2: V moved down 0.5 away from R=2 -> V_clip = 0.8: max((0.5-2)^2, (0.8-2)^2) = max(2.25, 1.44) -> 1.125
    # token 3: inside the range (|1.1 - 1| < 0.2): V_clip = V -> 0.5 * 0.05^2 = 0.00125
    # token 3 is the square of a difference of nearby numbers: rounding of the values' size (tests/conftest.py)
    assert_close_up_to_rounding(loss[0], torch.tensor([0.32, 0.32, 1.125, 0.00125]), terms=4)
    assert clipped[0].tolist() == [True, True, False, False]


def test_value_loss_gradient_is_cut_where_clipped():
    values = torch.tensor([[1.5, 0.5]], requires_grad=True)
    loss, _ = clipped_value_loss(values, torch.ones(1, 2), torch.tensor([[2.0, 2.0]]), clip=0.2)
    loss.sum().backward()
    # token 0 (clipped branch wins): no gradient; token 1 (unclipped): d/dV 1/2 (V-R)^2 = 0.5 - 2 = -1.5
    assert values.grad[0].tolist() == pytest.approx([0.0, -1.5])


def test_a_value_inside_the_clip_range_is_never_counted_as_clipped():
    """float32: V_old + (V - V_old) is not V. With V_old = -0.1, V = 0.2, c = 0.5 it is
    0.2 + 1.5e-8, a little farther from R = 0 than V, so the clipped branch was the larger
    one and the token counted as clipped although |V - V_old| = 0.3 < c."""
    old = torch.tensor([[-0.1, -0.2, 0.1, 0.2]])
    values = torch.tensor([[0.2, 0.1, -0.2, -0.1]], requires_grad=True)  # each 0.3 from V_old
    returns = torch.zeros(1, 4)
    assert (old + torch.clamp(values - old, -0.5, 0.5) != values).all()  # the rounding shown
    loss, clipped = clipped_value_loss(values, old, returns, clip=0.5)
    assert clipped[0].tolist() == [False, False, False, False]
    # Inside the range the loss is the unclipped 1/2 (V - R)^2 and so is its gradient V - R.
    assert loss[0].tolist() == pytest.approx([0.02, 0.005, 0.02, 0.005])
    loss.sum().backward()
    assert values.grad[0].tolist() == pytest.approx([0.2, 0.1, -0.2, -0.1])


def test_whiten_uses_only_masked_entries():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # mean of [1, 3] = 2, population std = 1 -> [-1, +1] (the unbiased std, sqrt(2), would give
    # -/+0.707, as verl's masked_whiten); padding 0
    assert_close_up_to_rounding(whiten(x, mask)[0], torch.tensor([-1.0, 1.0, 0.0]), terms=4)  # mean, var, eps
    assert whiten(x, torch.tensor([[1.0, 0.0, 0.0]]))[0].tolist() == [0.0, 0.0, 0.0]  # one value: centred
    assert whiten(x, torch.zeros(1, 3))[0].tolist() == [0.0, 0.0, 0.0]


def test_whiten_over_shards_uses_the_whole_batchs_mean_and_variance():
    """Data-parallel PPO: each rank holds a shard of the batch. The whole batch [1, 3, 5, 7] has
    mean 4 and population variance (9 + 1 + 1 + 9) / 4 = 5; shard [1, 3] alone has mean 2 and
    variance 1, which would give [-1, 1]."""
    other_shard = iter([[2.0, 12.0],   # shard [5, 7]: count 2, sum 12
                        [10.0]])       # its (x - 4)^2: 1 + 9
    calls = []

    def sum_over_shards(values):
        calls.append(values)
        return [a + b for a, b in zip(values, next(other_shard))]

    x = torch.tensor([[1.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = whiten(x, mask, eps=0.0, sum_over_shards=sum_over_shards)
    assert out[0].tolist() == pytest.approx([-3 / math.sqrt(5), -1 / math.sqrt(5), 0.0])
    assert calls == [[2.0, 4.0], [10.0]]  # this shard's count and sum, then its squares about the global mean


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)  # perfect critic
    assert explained_variance(torch.full((1, 4), 2.0), returns, mask) == pytest.approx(0.0)  # a constant
    # V = [1, 1, 1]: R - V = [0, 1, 2], var 2/3; var R = 2/3 -> 1 - 1 = 0
    assert explained_variance(torch.ones(1, 4), returns, mask) == pytest.approx(0.0)
    # V = [3, 2, 1]: R - V = [-2, 0, 2], var 8/3 -> 1 - (8/3)/(2/3) = -3
    assert explained_variance(torch.tensor([[3.0, 2.0, 1.0, 0.0]]), returns, mask) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(returns, torch.ones(1, 4), mask))  # returns do not vary
