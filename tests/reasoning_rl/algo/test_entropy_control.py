"""Entropy control by covariance (Clip-Cov, KL-Cov; arXiv 2505.22617), the 80/20 rule (arXiv
2506.01939) and the position deciles of the entropy metric, on hand-worked numbers."""

import pytest
import torch

from reasoning_rl.algo.entropy_control import (
    EntropyControlConfig,
    clip_cov,
    high_entropy_tokens,
    kl_cov,
    position_deciles,
    token_covariance,
)
from reasoning_rl.algo.grpo import GRPOConfig
from reasoning_rl.algo.loss_tokens import loss_tokens
from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig, grpo_loss
from tests.reasoning_rl.algo.conftest import set_settings

# Two completions of two tokens: log pi = [[0, -2], [-1, -1]], advantages +1 and -1.
# mean(log pi) = -1, mean(A) = 0 -> Cov_t = (log pi + 1) * A = [[1, -1], [0, 0]]
LOGP = torch.tensor([[0.0, -2.0], [-1.0, -1.0]])
ADV = torch.tensor([[1.0], [-1.0]])
MASK = torch.ones(2, 2)


def _grad(control, ec: EntropyControlConfig, entropy=None, old_shift: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """per-token loss = log pi (gradient 1 everywhere before the control) -> (loss, d loss / d log pi)."""
    logp = LOGP.clone().requires_grad_(True)
    ctx = loss_tokens(logp, LOGP - old_shift, ADV, MASK, entropy=entropy)
    out = control(logp * 1.0, ctx, ec)
    (g,) = torch.autograd.grad(out.sum(), logp)
    return out.detach(), g


def test_token_covariance_hand_worked():
    assert token_covariance(LOGP, ADV, MASK).flatten().tolist() == pytest.approx([1, -1, 0, 0])
    # padding is left out of the means and gets 0: second token of row 2 masked ->
    # mean(log pi) = -1, mean(A) = (1 + 1 - 1) / 3 = 1/3; token (1, 0): (-1 + 1) * (-4/3) = 0
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    cov = token_covariance(LOGP, ADV, mask)
    assert cov.flatten().tolist() == pytest.approx([2 / 3, -2 / 3, 0.0, 0.0])


def test_clip_cov_detaches_a_token_within_the_bounds():
    # 1/4 of 4 tokens = 1 token, drawn among those with 1 <= Cov <= 5: only (0, 0) (Cov = 1)
    values, g = _grad(clip_cov, EntropyControlConfig("clip_cov", fraction=0.25, cov_low=1.0, cov_high=5.0))
    assert g.flatten().tolist() == [0.0, 1.0, 1.0, 1.0]
    assert values.flatten().tolist() == LOGP.flatten().tolist()  # the value is kept, only the gradient goes
    # bounds no token meets: nothing is detached
    _, g = _grad(clip_cov, EntropyControlConfig("clip_cov", fraction=0.25, cov_low=2.0, cov_high=5.0))
    assert g.flatten().tolist() == [1.0] * 4


def test_kl_cov_penalises_the_top_covariance_token():
    # top 1/4 by Cov: (0, 0). log pi_old = log pi - 0.5 -> + 2 * |0.5| = 1.0 on that token, and its
    # gradient gains 2 * sign(log pi - log pi_old) = +2
    values, g = _grad(kl_cov, EntropyControlConfig("kl_cov", fraction=0.25, kl_coef=2.0), old_shift=0.5)
    assert values.flatten().tolist() == pytest.approx([0.0 + 1.0, -2.0, -1.0, -1.0])
    assert g.flatten().tolist() == pytest.approx([3.0, 1.0, 1.0, 1.0])


def test_high_entropy_tokens_keep_the_gradient():
    entropy = torch.tensor([[0.1, 2.0], [0.5, 1.0]])
    _, g = _grad(high_entropy_tokens, EntropyControlConfig("high_entropy", top_fraction=0.25), entropy)
    assert g.flatten().tolist() == [0.0, 1.0, 0.0, 0.0]  # the top 25%: entropy 2.0
    _, g = _grad(high_entropy_tokens, EntropyControlConfig("high_entropy", top_fraction=0.5), entropy)
    assert g.flatten().tolist() == [0.0, 1.0, 0.0, 1.0]  # top 50%: 2.0 and 1.0


def test_high_entropy_through_grpo_loss():
    # ratio 1, A = +1 on one 2-token completion, sequence mean: loss = -(1 + 1) / 2; the 80/20 rule
    # with top 50% keeps the higher-entropy token: d loss / d log pi = [0, -1/2]
    logp = torch.zeros(1, 2, requires_grad=True)
    out = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0]), torch.ones(1, 2),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.0),
                               entropy_control=EntropyControlConfig("high_entropy", top_fraction=0.5)), entropy=torch.tensor([[0.3,
                               0.9]]))
    (g,) = torch.autograd.grad(out.loss, logp)
    assert out.loss.item() == pytest.approx(-1.0) and g[0].tolist() == pytest.approx([0.0, -0.5])


def test_position_deciles():
    # relative position t / (n - 1): 5 tokens: floor(10 * [0, .25, .5, .75, 1]) = 0, 2, 5, 7, 10 -> 9 (the
    # last token is decile 9); 3 tokens: 0, 5, 9; 1 token: 0; padding -1
    mask = torch.tensor([[1.0] * 5, [1.0, 1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    assert position_deciles(mask).tolist() == [[0, 2, 5, 7, 9], [0, 5, 9, -1, -1], [0, -1, -1, -1, -1]]


@pytest.mark.parametrize(("changes", "message"), [
    ({"entropy_control.name": "entropy_bonus"}, "algo.entropy_control.name='entropy_bonus' is unknown"),
    ({"entropy_control.cov_low": 5.0, "entropy_control.cov_high": 1.0}, "no token could be picked"),
])
def test_config_problems(changes, message):
    assert any(message in p for p in set_settings(GRPOConfig(), changes).problems())
