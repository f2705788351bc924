"""The unified paradigm's coefficients and losses (SFT, RFT, Online RFT, DPO) on hand-worked numbers."""

import math

import pytest
import torch

from reasoning_rl.algo.aggregation import LossNormalizer
from reasoning_rl.algo.likelihood import (
    dpo_coefficients,
    dpo_loss,
    dpo_margin,
    rejection_coefficients,
    sequence_logprob,
    sft_coefficients,
    weighted_nll,
)

MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_coefficients():
    assert sft_coefficients(3).tolist() == [1.0, 1.0, 1.0]
    assert rejection_coefficients([True, False, True]).tolist() == [1.0, 0.0, 1.0]


def test_weighted_nll_is_eq5_with_one_coefficient_per_sequence():
    # Sequence 0: tokens -1, -2 (mean -1.5), GC 1; sequence 1: -0.5, GC 0. N = 2.
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]], requires_grad=True)
    loss = weighted_nll(logp, torch.tensor([1.0, 0.0]), MASK, LossNormalizer.for_mask(MASK))
    assert float(loss) == pytest.approx(0.75)  # -(1 * -1.5 + 0) / 2
    loss.backward()
    # d loss / d logp_it = -GC_i / (N |o_i|): -1/4 on sequence 0's tokens, 0 elsewhere (padding included).
    assert logp.grad.tolist() == [[-0.25, -0.25, 0.0], [0.0, 0.0, 0.0]]


def test_weighted_nll_denominator_counts_rejected_sequences():
    """RFT: N is every sampled completion, so the zero-coefficient rows still divide the loss."""
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    half = weighted_nll(logp[:1], torch.tensor([1.0]), MASK[:1], LossNormalizer(num_sequences=2.0, num_tokens=3.0))
    assert float(half) == pytest.approx(0.75)


def test_micro_batch_losses_add_up_to_the_batch_loss():
    torch.manual_seed(0)
    logp = -torch.rand(5, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    gc = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    norm = LossNormalizer.for_mask(mask)
    whole = weighted_nll(logp, gc, mask, norm)
    parts = weighted_nll(logp[:2], gc[:2], mask[:2], norm) + weighted_nll(logp[2:], gc[2:], mask[2:], norm)
    assert float(parts) == pytest.approx(float(whole))


def test_sequence_logprob_sums_real_tokens():
    logp = torch.tensor([[-1.0, -2.0, -7.0], [-0.5, -7.0, -7.0]])
    assert sequence_logprob(logp, MASK).tolist() == [-3.0, -0.5]


def test_dpo_margin_loss_and_coefficient():
    # log pi(o+) = -1, log pi(o-) = -2, pi_ref gives both -1.5; beta = 0.1:
    # z = 0.1 * ((-1 + 1.5) - (-2 + 1.5)) = 0.1
    z = dpo_margin(torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-1.5]), torch.tensor([-1.5]), 0.1)
    assert float(z) == pytest.approx(0.1)
    assert float(dpo_loss(z)) == pytest.approx(math.log(1 + math.exp(-0.1)))  # -log sigmoid(0.1) = 0.6444
    assert float(dpo_coefficients(z, 0.1)) == pytest.approx(0.1 / (1 + math.exp(0.1)))  # 0.1 * sigmoid(-0.1)


def test_dpo_loss_is_log2_at_the_reference_and_its_gradient_is_the_coefficient():
    chosen = torch.tensor([-3.0, -1.0], requires_grad=True)
    rejected = torch.tensor([-2.0, -4.0], requires_grad=True)
    beta = 0.5
    z = dpo_margin(chosen, rejected, chosen.detach(), rejected.detach(), beta)
    loss = dpo_loss(z)
    assert float(loss) == pytest.approx(math.log(2))  # policy = reference: z = 0 for every pair
    loss.backward()
    # d loss / d log pi(o+) = -GC / P, d loss / d log pi(o-) = +GC / P with GC = beta * sigmoid(-z).
    gc = dpo_coefficients(z.detach(), beta)
    assert chosen.grad.tolist() == pytest.approx((-gc / 2).tolist())
    assert rejected.grad.tolist() == pytest.approx((gc / 2).tolist())


def test_dpo_loss_with_the_batch_pair_count_adds_up_and_is_stable():
    z = torch.tensor([0.3, -0.2, 1.0])
    whole = dpo_loss(z)
    assert float(dpo_loss(z[:1], 3.0) + dpo_loss(z[1:], 3.0)) == pytest.approx(float(whole))
    assert math.isfinite(float(dpo_loss(torch.tensor([-1e4]))))  # logsigmoid: no overflow


def test_weighted_nll_token_mean_weighs_every_target_token_alike():
    """The warm start's cross-entropy: one mean over all T target tokens of the step."""
    # Tokens -1, -2 (sequence 0) and -0.5 (sequence 1), GC 1 each: T = 3, loss = 3.5 / 3.
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]], requires_grad=True)
    loss = weighted_nll(logp, torch.ones(2), MASK, LossNormalizer.for_mask(MASK), aggregation="token_mean")
    assert float(loss) == pytest.approx(3.5 / 3)
    loss.backward()
    # d loss / d logp_it = -1/T on every target token (sequence_mean would give -1/4 and -1/2).
    torch.testing.assert_close(logp.grad, torch.tensor([[-1 / 3, -1 / 3, 0.0], [-1 / 3, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="unknown aggregation 'median'; expected one of sequence_mean, token_mean"):
        weighted_nll(logp, torch.ones(2), MASK, aggregation="median")
