"""The GRPO loss terms on hand-worked numbers."""

import math

import pytest
import torch

from reasoning_rl.algo import (
    LOSS_AGGREGATIONS,
    LossNormalizer,
    aggregate,
    clipped_surrogate,
    constant_normalizer,
    grpo_loss,
    kl_k3,
    policy_ratio,
    sequence_mean,
    token_mean,
)
from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig
from tests.conftest import assert_close_up_to_rounding

pytestmark = pytest.mark.numerics


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
        groups = LossGroups(kl=KLConfig(beta=0.0), aggregation=agg)
        norm = LossNormalizer.for_mask(mask, max_tokens=3.0)  # the whole batch's denominators
        full = torch.autograd.grad(grpo_loss(logits, old, None, adv, mask, groups, norm).loss, logits)[0]
        parts = torch.zeros_like(full)
        for s in (0, 2):
            sub = logits[s:s + 2]
            out = grpo_loss(sub, old[s:s + 2], None, adv[s:s + 2], mask[s:s + 2], groups, norm)
            parts += torch.autograd.grad(out.loss, logits)[0]  # micro-batch losses simply add up
        assert_close_up_to_rounding(parts, full, terms=3 + 2, msg=agg)  # a row's 3 tokens, then 2 micro-batches


def test_grpo_loss_at_ratio_one():
    # ratio = 1, no clipping: per-token -A; sequence_mean -> -(1 + -1)/2 = 0 policy loss;
    # KL: ref = logp - log 2 -> pi_ref/pi = 0.5 -> k3 = 0.193147 per token; beta 0.1 -> 0.0193147
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.25]]))
    ref = logp - math.log(2)
    out = grpo_loss(logp, logp, ref, torch.tensor([1.0, -1.0]), torch.ones(2, 2),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.1)))
    assert out.loss.item() == pytest.approx(0.1 * (0.5 - math.log(0.5) - 1))
    assert out.kl == pytest.approx(0.5 - math.log(0.5) - 1)
    assert out.clip_low_fraction == 0.0 and out.clip_high_fraction == 0.0


def test_clip_fractions():
    # A = +1: ratio 1.5 clipped high; A = -1: ratio 0.5 clipped low
    logp = torch.log(torch.tensor([[0.75], [0.25]]))
    old = torch.log(torch.tensor([[0.5], [0.5]]))
    out = grpo_loss(logp, old, None, torch.tensor([1.0, -1.0]), torch.ones(2, 1),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.0)))
    assert (out.clip_high_fraction, out.clip_low_fraction) == (0.5, 0.5)


def test_beta_without_reference_is_an_error():
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), None, torch.zeros(1), torch.ones(1, 1),
                  LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.1)))


def test_token_statistics_are_token_means():
    # Two sequences, 3 and 1 tokens: pi_ref/pi = 0.5 on the first, 1 on the second.
    # k3 per token: 0.193147 x 3 and 0 x 1 -> token mean 3 * 0.193147 / 4 = 0.144860
    # (a mean of per-sequence means would say (0.193147 + 0) / 2 = 0.096574).
    logp = torch.zeros(2, 3)
    ref = torch.tensor([[-math.log(2)] * 3, [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    out = grpo_loss(logp, logp, ref, torch.zeros(2), mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.1)))
    k3 = 0.5 - math.log(0.5) - 1
    assert out.kl == pytest.approx(3 * k3 / 4)
    assert out.num_tokens == 4.0


def test_policy_loss_uses_the_loss_aggregation():
    # ratio 1, beta 0: per-token policy loss = -A; A = [1, -2], lengths 3 and 1.
    # token_mean: (-1 * 3 + 2 * 1) / 4 = -0.25; sequence_mean: (-1 + 2) / 2 = 0.5
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    tok = grpo_loss(logp, logp, None, adv, mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.0),
                               aggregation="token_mean"))
    seq = grpo_loss(logp, logp, None, adv, mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.0),
                               aggregation="sequence_mean"))
    assert (tok.policy_loss, seq.policy_loss) == (pytest.approx(-0.25), pytest.approx(0.5))
    assert tok.loss.item() == pytest.approx(tok.policy_loss)


def test_every_aggregation_splits_into_micro_batches_that_add_up():
    # One normaliser for the batch (N = 3 sequences, 6 tokens, L_max = 4): the three
    # one-row losses add up to the three-row loss, whatever the aggregation.
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    norm = LossNormalizer.for_batch([3, 1, 2], max_tokens=4)
    assert (norm.num_sequences, norm.num_tokens, norm.max_tokens) == (3.0, 6.0, 4.0)
    expected = {"sequence_mean": (2 + 4 + 5.5) / 3, "token_mean": 21 / 6, "constant": (6 / 4 + 4 / 4 + 11 / 4) / 3}
    for name, value in expected.items():
        whole = aggregate(name, values, mask, norm)
        parts = sum(aggregate(name, values[i:i + 1], mask[i:i + 1], norm) for i in range(3))
        assert whole.item() == pytest.approx(value) and parts.item() == pytest.approx(value), name


def test_extreme_pad_log_probs_cannot_make_the_loss_nan():
    # A padded position holding log pi(<pad>) = -1000 (as a raw forward would give) while the
    # reference row is zero-filled there: k3 = exp(1000) - ... = inf, and inf * 0 = NaN.
    # Masking selects 0 at padded positions instead of multiplying by 0.
    logp = torch.tensor([[-1.0, -1.0], [-1.0, -1000.0]], requires_grad=True)
    ref = torch.tensor([[-1.2, -0.8], [-1.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    for agg in LOSS_AGGREGATIONS:
        out = grpo_loss(logp, logp.detach(), ref, torch.tensor([1.0, -1.0]), mask,
                        LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.04),
                                   aggregation=agg))
        (grad,) = torch.autograd.grad(out.loss, logp)
        assert math.isfinite(out.loss.item()) and math.isfinite(out.kl), agg
        assert torch.isfinite(grad).all() and grad[1, 1] == 0.0, agg
