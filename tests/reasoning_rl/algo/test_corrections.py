"""Off-policy corrections on hand-worked ratios rho = pi_train / mu, on both sides of every bound."""

import math

import pytest
import torch

from reasoning_rl.algo.corrections import (
    CORRECTIONS,
    CorrectionConfig,
    apply_correction,
)
from reasoning_rl.algo.grpo import GRPOConfig
from reasoning_rl.algo.loss_tokens import loss_tokens
from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig, grpo_loss
from tests.conftest import assert_close_up_to_rounding

pytestmark = pytest.mark.numerics

LOG = math.log


def close(actual, expected):
    """Hand-worked values of a few float32 operations (tests/conftest.py's rule, 8 terms)."""
    assert_close_up_to_rounding(actual.double(), torch.tensor(expected, dtype=torch.float64), terms=8, dtype=actual.dtype)


def inputs(rho, mask=None, adv=1.0, logp=None, behaviour=None):
    """Rows of ratios rho as log pi_old - log mu with mu = 0.5 (so pi_old = 0.5 rho, a probability for rho <= 2)."""
    rho = torch.tensor(rho, dtype=torch.float64)
    mu = torch.full_like(rho, 0.5) if behaviour is None else torch.tensor(behaviour, dtype=torch.float64)
    train = torch.log(rho) + torch.log(mu)
    mask = torch.ones_like(rho) if mask is None else torch.tensor(mask, dtype=torch.float64)
    adv = torch.tensor(adv, dtype=torch.float64).reshape(-1, 1) if not isinstance(adv, float) else torch.full(
        (rho.shape[0], 1), adv, dtype=torch.float64)
    current = train if logp is None else torch.tensor(logp, dtype=torch.float64)
    return loss_tokens(current, train, adv, mask, torch.log(mu))


def test_none_weighs_every_real_token_one_and_padding_zero():
    c = apply_correction(CorrectionConfig("none"), inputs([[3.0, 0.1]], mask=[[1, 0]]))
    assert c.weight.tolist() == [[1.0, 0.0]]
    assert not c.masked.any() and not c.truncated.any()


def test_tis_truncates_the_weight_at_c():
    # rho = 0.5, 1.5 (below C = 2: kept as is), 2 (at C: kept), 3 (above: min(3, 2) = 2, truncated)
    c = apply_correction(CorrectionConfig("tis", c=2.0), inputs([[0.5, 1.5, 2.0, 3.0]]))
    assert c.weight[0].tolist() == pytest.approx([0.5, 1.5, 2.0, 2.0])
    assert c.truncated[0].tolist() == [False, False, False, True]
    assert not c.masked.any()


def test_mis_token_keeps_rho_inside_the_bounds_and_masks_outside():
    # [a, b] = [0.5, 2]: 0.4 < a masked, 0.5 = a kept with weight 0.5, 2 = b kept, 2.5 > b masked
    c = apply_correction(CorrectionConfig("mis_token", low=0.5, high=2.0), inputs([[0.4, 0.5, 2.0, 2.5]]))
    assert c.weight[0].tolist() == pytest.approx([0.0, 0.5, 2.0, 0.0])
    assert c.masked[0].tolist() == [True, False, False, True]


def test_mis_seq_uses_the_product_of_the_tokens_ratios():
    # row 0: 2 * 0.75 = 1.5 in [0.5, 2]: weight 1.5 on both tokens
    # row 1: 2 * 2 = 4 > 2: the whole sequence is masked, though each token alone would be kept
    # row 2: 0.5 * 0.8 = 0.4 < 0.5: masked
    # row 3: one real token 3.0 (the padded one counts rho = 1): 3 > 2, masked
    c = apply_correction(CorrectionConfig("mis_seq"), inputs([[2.0, 0.75], [2.0, 2.0], [0.5, 0.8], [3.0, 9.0]],
                                           mask=[[1, 1], [1, 1], [1, 1], [1, 0]]))
    close(c.weight, [[1.5, 1.5], [0, 0], [0, 0], [0, 0]])
    assert c.masked.tolist() == [[False, False], [True, True], [True, True], [True, False]]


def test_mis_geo_masks_by_the_geometric_mean_and_keeps_token_weights():
    # row 0: rho 3 and 1/3: geometric mean 1 (kept), weights 3 and 1/3 (mis_token would mask the 3)
    # row 1: rho 4 and 4: geometric mean 4 > 2, masked
    # row 2: rho 1.5, 1.5, 1.5, pad: geometric mean over the 3 real tokens 1.5 (kept)
    c = apply_correction(CorrectionConfig("mis_geo"), inputs([[3.0, 1 / 3, 1.0], [4.0, 4.0, 1.0], [1.5, 1.5, 1.5]],
                                           mask=[[1, 1, 0], [1, 1, 0], [1, 1, 1]]))
    close(c.weight, [[3.0, 1 / 3, 0.0], [0, 0, 0], [1.5, 1.5, 1.5]])
    assert c.masked[1, :2].all() and not c.masked[0].any() and not c.masked[2].any()


def test_icepop_masks_outside_its_papers_bounds_whatever_the_options():
    # [0.5, 5]: 0.49 masked, 0.5 kept, 4.9 kept (mis_token at [0.5, 2] would mask it), 5.1 masked
    c = apply_correction(CorrectionConfig("icepop", low=0.9, high=1.1), inputs([[0.49, 0.5, 4.9, 5.1]]))
    assert c.weight[0].tolist() == pytest.approx([0.0, 0.5, 4.9, 0.0])
    assert c.masked[0].tolist() == [True, False, False, True]


def test_dppo_tv_blocks_only_the_update_that_leaves_the_region():
    # pi_theta, mu per token; delta = 0.2
    # t0: 0.6 vs 0.3 (+0.3 out of the region): A > 0 pushes pi_theta up, further out -> blocked
    # t1: 0.1 vs 0.4 (-0.3): A > 0 pushes it up, back in -> kept
    # t2: 0.45 vs 0.3 (+0.15, inside) -> kept
    logp = [[LOG(0.6), LOG(0.1), LOG(0.45)], [LOG(0.6), LOG(0.1), LOG(0.45)]]
    mu = [[0.3, 0.4, 0.3], [0.3, 0.4, 0.3]]
    x = inputs([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], adv=[1.0, -1.0], logp=logp, behaviour=mu)
    c = apply_correction(CorrectionConfig("dppo_tv", delta=0.2), x)
    # row 1 has A < 0: t0 (above, pushed down) kept, t1 (below, pushed further down) blocked
    assert c.masked.tolist() == [[True, False, False], [False, True, False]]
    assert c.weight.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]]


def test_trust_region_mask_drops_a_sequence_by_its_worst_token():
    # k3(rho) = rho - 1 - log rho:  k3(2) = 1 - 0.6931 = 0.3069;  k3(1.1) = 0.1 - 0.0953 = 0.00469;
    # k3(0.9) = -0.1 + 0.1054 = 0.00536
    x = inputs([[1.0, 2.0], [1.1, 0.9]])
    c = apply_correction(CorrectionConfig("trust_region_mask", kl_max=0.05), x)
    assert c.masked.tolist() == [[True, True], [False, False]]
    assert c.weight.tolist() == [[0.0, 0.0], [1.0, 1.0]]
    # the bound between row 1's worst token (0.00536) and its other one (0.00469) masks it too
    c = apply_correction(CorrectionConfig("trust_region_mask", kl_max=0.005), x)
    assert c.masked.all()
    assert not apply_correction(CorrectionConfig("trust_region_mask", kl_max=0.006), x).masked[1].any()


def test_every_correction_gives_detached_weights_and_zero_on_padding():
    x = inputs([[1.2, 0.9, 7.0]], mask=[[1, 1, 0]])
    for name in CORRECTIONS:
        c = apply_correction(CorrectionConfig(name), x)
        assert not c.weight.requires_grad
        assert c.weight[0, 2] == 0 and not c.masked[0, 2] and not c.truncated[0, 2]


def test_unknown_correction_lists_the_known_ones():
    with pytest.raises(ValueError, match="tis"):
        apply_correction(CorrectionConfig("tiss"), inputs([[1.0]]))
    problems = GRPOConfig(correction=CorrectionConfig("tiss", low=3.0)).problems()
    assert any("algo.correction.name='tiss' is unknown" in p and "icepop" in p for p in problems)
    assert any("algo.correction.low=3.0 is above algo.correction.high" in p for p in problems)


def _loss(logp, old, behaviour, adv, mask, correction: CorrectionConfig, policy: str = "clip",
          aggregation: str = "sequence_mean"):
    groups = LossGroups(policy=PolicyLossConfig(name=policy), kl=KLConfig(beta=0.0), aggregation=aggregation,
                        correction=correction)
    return grpo_loss(logp, old, None, adv, mask, groups, behaviour_logp=behaviour)


def test_decoupled_ppo_weight_reads_pi_old_and_the_clip_reads_pi_theta_over_pi_old():
    # mu > 1 updates: pi_theta = 0.75, pi_old = 0.5, mu = 0.25 on one token, A = 1.
    # weight: tis on pi_old / mu = 2 (C = 4: not truncated)   [pi_theta / mu = 3 would be wrong]
    # clip:   ratio pi_theta / pi_old = 1.5 -> min(1.5 * 1, 1.2 * 1) = 1.2
    # loss = -(2 * 1.2) = -2.4
    logp = torch.tensor([[LOG(0.75)]])
    out = _loss(logp, torch.tensor([[LOG(0.5)]]), torch.tensor([[LOG(0.25)]]), torch.tensor([1.0]),
                torch.ones(1, 1), CorrectionConfig("tis", c=4.0))
    assert float(out.loss) == pytest.approx(-2.4)
    assert out.ratio_mean == pytest.approx(1.5)


def test_one_update_weighs_the_gradient_by_the_correction():
    # mu = 1: pi_old = pi_theta detached (ratio 1). Two tokens of one sequence, A = 1, sequence_mean:
    # loss = -1/2 (w0 * r0 + w1 * r1), d loss / d logp_t = -w_t / 2.
    # tis, C = 2: rho0 = 0.5 (w 0.5), rho1 = 4 (w 2, truncated) -> gradient [-0.25, -1.0]
    logp = torch.tensor([[LOG(0.5), LOG(0.8)]], requires_grad=True)
    behaviour = torch.tensor([[LOG(1.0), LOG(0.2)]])
    out = _loss(logp, logp.detach(), behaviour, torch.tensor([1.0]), torch.ones(1, 2), CorrectionConfig("tis"))
    out.loss.backward()
    close(logp.grad, [[-0.25, -1.0]])
    assert out.correction.truncated.tolist() == [[False, True]]


@pytest.mark.parametrize("policy_loss", ["clip", "cispo", "gmpo"])
def test_a_masked_token_loses_its_share_of_the_policy_term_in_every_objective(policy_loss):
    # icepop: rho0 = 1 (kept, w = 1), rho1 = 6 (masked). A = 1, ratio 1, token_mean over 2 tokens.
    # clip:  d/d logp_t of -w_t * r_t / 2 = -w_t / 2                                 -> [-0.5, 0]
    # cispo: -w_t * sg(clip(r_t)) * A * logp_t / 2                                    -> [-0.5, 0]
    # gmpo:  the sequence term exp(mean_t log r_t) * A on both tokens, each weighed: -(w0 + w1)/2 * J;
    #        dJ / d logp_t = J / 2 -> gradient -(1 + 0) / 2 * 1/2 = -0.25 on each token: GMPO's term is one
    #        per sequence, so the masked token still moves through the geometric mean (docs/offpolicy.md)
    logp = torch.tensor([[LOG(0.5), LOG(0.6)]], requires_grad=True)
    behaviour = torch.tensor([[LOG(0.5), LOG(0.1)]])
    out = _loss(logp, logp.detach(), behaviour, torch.tensor([1.0]), torch.ones(1, 2), CorrectionConfig("icepop"),
                policy=policy_loss, aggregation="token_mean")
    out.loss.backward()
    expected = [[-0.25, -0.25]] if policy_loss == "gmpo" else [[-0.5, 0.0]]
    close(logp.grad, expected)


def test_unknown_behaviour_log_probs_mean_no_correction():
    # NaN behaviour (a completion without log-probs): pi_old is used, rho = 1, weight 1 under every correction
    logp = torch.tensor([[LOG(0.5), LOG(0.5)]])
    for name in CORRECTIONS:
        out = _loss(logp, logp, torch.tensor([[math.nan, math.nan]]), torch.tensor([1.0]), torch.ones(1, 2),
                    CorrectionConfig(name))
        assert out.correction.weight.tolist() == [[1.0, 1.0]], name
        assert float(out.loss) == pytest.approx(-1.0)


def test_without_behaviour_log_probs_the_loss_is_unchanged():
    logp = torch.tensor([[LOG(0.5), LOG(0.7)]])
    plain = _loss(logp, logp, None, torch.tensor([1.0]), torch.ones(1, 2), CorrectionConfig("tis"))
    assert plain.correction is None and float(plain.loss) == pytest.approx(-1.0)
