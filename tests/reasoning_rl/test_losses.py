"""The GRPO loss terms on hand-worked numbers."""

import math

import pytest
import torch

from reasoning_rl.algo import (
    clipped_surrogate,
    constant_normalizer,
    grpo_loss,
    kl_k3,
    microbatch_weight,
    policy_ratio,
    sequence_mean,
    token_mean,
)


def test_ratio():
    assert policy_ratio(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])).item() == pytest.approx(2.0)


def test_clipping_upper_side_positive_advantage():
    # A = +1, eps = 0.2: ratio 1.5 -> min(1.5, 1.2) = 1.2; ratio 0.5 -> min(0.5, 0.8) = 0.5
    s = clipped_surrogate(torch.tensor([[1.5, 0.5]]), torch.tensor([1.0]), 0.2, 0.2)
    assert s[0].tolist() == pytest.approx([1.2, 0.5])


def test_clipping_lower_side_negative_advantage():
    # A = -1: ratio 0.5 -> min(-0.5, -0.8) = -0.8; ratio 1.5 -> min(-1.5, -1.2) = -1.5
    s = clipped_surrogate(torch.tensor([[0.5, 1.5]]), torch.tensor([-1.0]), 0.2, 0.2)
    assert s[0].tolist() == pytest.approx([-0.8, -1.5])


def test_clip_higher_is_asymmetric():
    # eps_low 0.2, eps_high 0.28 (DAPO): ratio 1.3 with A = 1 -> 1.28
    assert clipped_surrogate(torch.tensor([[1.3]]), torch.tensor([1.0]), 0.2, 0.28).item() == pytest.approx(1.28)


def test_kl_k3():
    # pi_ref / pi_theta = 0.5: 0.5 - log 0.5 - 1 = 0.5 + 0.693147 - 1 = 0.193147
    logp, ref = torch.tensor([math.log(0.4)]), torch.tensor([math.log(0.2)])
    assert kl_k3(logp, ref).item() == pytest.approx(0.5 - math.log(0.5) - 1)
    # zero when the policies agree, positive otherwise
    assert kl_k3(ref, ref).item() == 0.0


def test_aggregations():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # paper: mean of per-sequence means = (2 + 4) / 2 = 3
    assert sequence_mean(values, mask).item() == pytest.approx(3.0)
    # DAPO: (1 + 2 + 3 + 4) / 4 tokens = 2.5
    assert token_mean(values, mask).item() == pytest.approx(2.5)
    # Dr. GRPO with L_max = 4: (6 / 4 + 4 / 4) / 2 = 1.25
    assert constant_normalizer(values, mask, max_tokens=4).item() == pytest.approx(1.25)


def test_microbatches_sum_to_full_batch_gradient():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, requires_grad=True)
    old = logits.detach() + 0.1 * torch.randn(4, 3)
    adv = torch.tensor([1.0, -1.0, 0.5, 2.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
    for agg in ("sequence_mean", "token_mean", "constant"):
        kw = dict(beta=0.0, eps_low=0.2, eps_high=0.2, aggregation=agg, num_tokens=float(mask.sum()), max_tokens=3.0)
        full = torch.autograd.grad(grpo_loss(logits, old, None, adv, mask, **kw).loss, logits)[0]
        parts = torch.zeros_like(full)
        for s in (0, 2):
            sub = logits[s:s + 2]
            out = grpo_loss(sub, old[s:s + 2], None, adv[s:s + 2], mask[s:s + 2], **kw)
            parts += torch.autograd.grad(out.loss * microbatch_weight(agg, 2, 4), logits)[0]
        assert torch.allclose(full, parts, atol=1e-6), agg


def test_grpo_loss_at_ratio_one():
    # ratio = 1, no clipping: per-token -A; sequence_mean -> -(1 + -1)/2 = 0 policy loss;
    # KL: ref = logp - log 2 -> pi_ref/pi = 0.5 -> k3 = 0.193147 per token; beta 0.1 -> 0.0193147
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    ref = logp - math.log(2)
    out = grpo_loss(logp, logp, ref, torch.tensor([1.0, -1.0]), torch.ones(2, 2), beta=0.1, eps_low=0.2, eps_high=0.2)
    assert out.loss.item() == pytest.approx(0.1 * (0.5 - math.log(0.5) - 1))
    assert out.kl == pytest.approx(0.5 - math.log(0.5) - 1)
    assert out.clip_low_fraction == 0.0 and out.clip_high_fraction == 0.0


def test_clip_fractions():
    # A = +1: ratio 1.5 clipped high; A = -1: ratio 0.5 clipped low
    logp = torch.log(torch.tensor([[0.75], [0.25]]))
    old = torch.log(torch.tensor([[0.5], [0.5]]))
    out = grpo_loss(logp, old, None, torch.tensor([1.0, -1.0]), torch.ones(2, 1), beta=0.0, eps_low=0.2, eps_high=0.2)
    assert (out.clip_high_fraction, out.clip_low_fraction) == (0.5, 0.5)


def test_beta_without_reference_is_an_error():
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), None, torch.zeros(1), torch.ones(1, 1),
                  beta=0.1, eps_low=0.2, eps_high=0.2)
