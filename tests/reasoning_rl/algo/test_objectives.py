"""The 2026 objectives as functions of the grpo module's tables (issue 31): CISPO, GMPO, dual-clip and
verl's clamps, W-REINFORCE / NSR, the pass@k advantage, MaxRL and the KL placements. Hand-worked
numbers, with the boundaries where each differs from GRPO."""

import itertools
import math

import pytest
import torch

from reasoning_rl.algo.advantages import advantage_options, compute_advantages
from reasoning_rl.algo.grpo import GRPOConfig
from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig, grpo_loss, reward_to_go
from tests.conftest import assert_close_up_to_rounding
from tests.reasoning_rl.algo.conftest import set_settings

pytestmark = pytest.mark.numerics

ONE = torch.ones(1, 1)


def _loss_and_grad(log_ratio: float, adv: float, **policy) -> tuple[float, float]:
    """One token with log(pi_theta / pi_old) = ``log_ratio`` (pi_old = 1/2): loss and d loss / d log pi_theta."""
    old = torch.tensor([[math.log(0.5)]])
    logp = (old + log_ratio).requires_grad_(True)
    groups = LossGroups(policy=PolicyLossConfig(**{"eps_low": 0.2, "eps_high": 0.2, **policy}), kl=KLConfig(beta=0.0))
    out = grpo_loss(logp, old, None, torch.tensor([adv]), ONE, groups)
    (grad,) = torch.autograd.grad(out.loss, logp)
    return out.loss.item(), grad.item()


# -- dual-clip PPO and verl's clamps ----------------------------------------------------------------

def test_dual_clip_caps_a_negative_advantage_far_above_the_clip():
    # A = -1, ratio 5: plain clip: min(5 * -1, 1.2 * -1) = -5 -> loss 5, d loss / d log pi = -A * ratio = 5
    assert _loss_and_grad(math.log(5), -1.0) == pytest.approx((5.0, 5.0))
    # dual-clip c = 3: max(-5, 3 * -1) = -3 -> loss 3, constant in theta: gradient 0
    assert _loss_and_grad(math.log(5), -1.0, dual_clip_c=3.0) == pytest.approx((3.0, 0.0))
    # ratio 2 < c: the bound is not active, same as plain clip (loss 2, gradient 2)
    assert _loss_and_grad(math.log(2), -1.0, dual_clip_c=3.0) == pytest.approx((2.0, 2.0))
    # A > 0 is never dual-clipped: ratio 5 -> min(5, 1.2) = 1.2, loss -1.2, gradient 0 (the upper clip)
    assert _loss_and_grad(math.log(5), 1.0, dual_clip_c=3.0) == pytest.approx((-1.2, 0.0))


def test_dual_clip_fraction_counts_tokens_past_c():
    old = torch.zeros(1, 3)
    logp = torch.tensor([[math.log(5), math.log(2), 0.0]])  # ratios 5, 2, 1; A = -1 on the row
    out = grpo_loss(logp, old, None, torch.tensor([-1.0]), torch.ones(1, 3),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2, dual_clip_c=3.0),
                               kl=KLConfig(beta=0.0)))
    assert out.clip_dual_fraction == pytest.approx(1 / 3)  # only ratio 5 > c = 3
    # sequence mean of the per-token losses: (3 + 2 + 1) / 3 = 2
    assert out.loss.item() == pytest.approx(2.0)


def test_log_ratio_clamp_bounds_the_ratio_and_stops_its_gradient():
    # log ratio 2, A = -1: unclamped loss e^2 = 7.389056 with gradient 7.389056
    assert _loss_and_grad(2.0, -1.0) == pytest.approx((math.exp(2), math.exp(2)))
    # clamped at 1: ratio e^1 = 2.718282, and the clamp has no gradient
    assert _loss_and_grad(2.0, -1.0, log_ratio_clamp=1.0) == pytest.approx((math.e, 0.0))


def test_kl_clamp_bounds_k3():
    # pi_ref / pi_theta = e^-15: k3 = e^-15 + 15 - 1 = 14.0000003; d k3 / d log pi = 1 - e^-15
    logp = torch.zeros(1, 1, requires_grad=True)
    ref = torch.full((1, 1), -15.0)
    for kl_clamp, value, grad in ((0.0, math.exp(-15) + 14, 1 - math.exp(-15)), (10.0, 10.0, 0.0)):
        out = grpo_loss(logp, logp.detach(), ref, torch.zeros(1), ONE,
                        LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2),
                                   kl=KLConfig(beta=1.0, clamp=kl_clamp)))
        (g,) = torch.autograd.grad(out.loss, logp)
        assert (out.kl, g.item()) == pytest.approx((value, grad))


# -- CISPO -----------------------------------------------------------------------------------------

def test_cispo_keeps_the_gradient_of_a_token_outside_the_clip():
    # A = +1, ratio 2 > 1 + eps_high = 1.28: GRPO's min(2, 1.28) is flat -> gradient 0;
    # CISPO: loss = -sg(1.28) * 1 * log pi -> d loss / d log pi = -1.28
    assert _loss_and_grad(math.log(2), 1.0, eps_high=0.28)[1] == pytest.approx(0.0)
    assert _loss_and_grad(math.log(2), 1.0, eps_high=0.28, name="cispo")[1] == pytest.approx(-1.28)
    # A = -1, ratio 0.5 < 1 - eps_low = 0.8: GRPO's min(-0.5, -0.8) = -0.8 is flat -> 0; CISPO: +0.8
    assert _loss_and_grad(math.log(0.5), -1.0)[1] == pytest.approx(0.0)
    assert _loss_and_grad(math.log(0.5), -1.0, name="cispo")[1] == pytest.approx(0.8)


def test_cispo_inside_the_clip_has_grpos_gradient():
    # ratio 1.1, A = 1: GRPO d(ratio * A) / d log pi = ratio * A = 1.1; CISPO: sg(1.1) * A = 1.1
    g_clip = _loss_and_grad(math.log(1.1), 1.0)[1]
    g_cispo = _loss_and_grad(math.log(1.1), 1.0, name="cispo")[1]
    assert g_clip == pytest.approx(-1.1) and g_cispo == pytest.approx(-1.1)


def test_cispo_counts_truncated_weights_on_both_sides():
    logp = torch.tensor([[math.log(2.0), math.log(0.5), 0.0]])  # ratios 2, 0.5, 1; A = +1
    out = grpo_loss(logp, torch.zeros(1, 3), None, torch.tensor([1.0]), torch.ones(1, 3),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.28, name="cispo"),
                               kl=KLConfig(beta=0.0)))
    # the weight is truncated whatever the sign of A (the gradient is kept either way)
    assert (out.clip_low_fraction, out.clip_high_fraction) == pytest.approx((1 / 3, 1 / 3))


# -- GMPO ------------------------------------------------------------------------------------------

def test_gmpo_geometric_mean_of_log_clipped_ratios():
    # two tokens, log ratios 0.1 and 0.7, eps = 0.4 in log space
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    for adv, mean_log, grads in (
        # A = +1: min(l, clip(l)) = 0.1, 0.4 -> mean 0.25; J = e^0.25 = 1.284025, loss -1.284025;
        # d loss / d log pi_1 = -e^0.25 / 2 = -0.642013, token 2 is clipped: 0
        (1.0, 0.25, [-math.exp(0.25) / 2, 0.0]),
        # A = -1: -min(-l, -clip(l)) = max(l, clip(l)) = 0.1, 0.7 -> mean 0.4; J = -e^0.4, loss 1.491825;
        # neither token is clipped: each gets e^0.4 / 2 = 0.745912
        (-1.0, 0.4, [math.exp(0.4) / 2, math.exp(0.4) / 2]),
    ):
        logp = torch.tensor([[0.1, 0.7]], requires_grad=True)
        out = grpo_loss(logp, old, None, torch.tensor([adv]), mask,
                        LossGroups(policy=PolicyLossConfig(eps_low=0.4, eps_high=0.4, name="gmpo"),
                                   kl=KLConfig(beta=0.0)))
        (g,) = torch.autograd.grad(out.loss, logp)
        assert out.loss.item() == pytest.approx(-adv * math.exp(mean_log))
        assert g[0].tolist() == pytest.approx(grads)
    # GRPO on the same tokens (eps 0.4, A = -1): mean of max(-r, ...) per token: (e^0.1 + e^0.7) / 2 = 1.559461,
    # the arithmetic mean that the outlier token 0.7 pulls up more than the geometric mean's 1.491825
    grpo = grpo_loss(torch.tensor([[0.1, 0.7]]), old, None, torch.tensor([-1.0]), mask,
                     LossGroups(policy=PolicyLossConfig(eps_low=0.4, eps_high=0.4), kl=KLConfig(beta=0.0)))
    assert grpo.loss.item() == pytest.approx((math.exp(0.1) + math.exp(0.7)) / 2)


# -- W-REINFORCE / NSR -----------------------------------------------------------------------------

def test_w_reinforce_and_nsr_advantages():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, math.nan, 1.0, 0.0]])
    # lambda = 0.1: correct -> 0.1, wrong -> -1; an all-correct group keeps 0.1 (GRPO: 0); unscorable -> 0
    adv = compute_advantages(rewards, "w_reinforce", positive_weight=0.1)
    assert adv.flatten().tolist() == pytest.approx([0.1, -1, 0.1, 0.1] + [0.1] * 4 + [-1, 0, 0.1, -1])
    # NSR (lambda = 0): only the wrong samples get a gradient
    nsr = compute_advantages(rewards, "w_reinforce", positive_weight=0.0)
    assert nsr.flatten().tolist() == pytest.approx([0, -1, 0, 0] + [0] * 4 + [-1, 0, 0, -1])


# -- pass@k ----------------------------------------------------------------------------------------

def _pass_at_k_brute_force(rewards: list[float], k: int) -> list[float]:
    """Every k-subset scores max(r); mean and population std over subsets; a sample's advantage is
    the mean over the subsets holding it of (score - mean) / std (0 when std = 0)."""
    n = len(rewards)
    subsets = list(itertools.combinations(range(n), k))
    scores = {s: max(rewards[i] for i in s) for s in subsets}
    mean = sum(scores.values()) / len(subsets)
    std = math.sqrt(sum((v - mean) ** 2 for v in scores.values()) / len(subsets))
    if std == 0:
        return [0.0] * n
    return [sum((scores[s] - mean) / std for s in subsets if i in s) / sum(1 for s in subsets if i in s)
            for i in range(n)]


def test_pass_at_k_hand_worked():
    # n = 4, c = 1, k = 2: pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5, sigma = 0.5
    # correct: (1 - 0.5) / 0.5 = 1; wrong: (1 - 0.5 - C(2,1)/C(3,1)) / 0.5 = (0.5 - 2/3) / 0.5 = -1/3
    adv = compute_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), "pass_at_k", k=2, eps=0.0)
    assert adv[0].tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])
    # GRPO on the same group rewards the correct sample more: 0.75 / 0.433013 = 1.732051, wrong -0.577350
    grpo = compute_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), "grpo", eps=0.0)
    assert grpo[0, 0].item() == pytest.approx(math.sqrt(3))


def test_pass_at_k_all_correct_or_all_wrong_group_gets_zero():
    rewards = torch.tensor([[1.0] * 8, [0.0] * 8])
    assert compute_advantages(rewards, "pass_at_k", k=4).abs().max().item() == 0.0


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_pass_at_k_closed_form_equals_enumerating_subsets(n):
    for c in range(n + 1):
        rewards = [1.0] * c + [0.0] * (n - c)
        for k in range(1, n + 1):
            got = compute_advantages(torch.tensor([rewards], dtype=torch.float64), "pass_at_k", k=k, eps=0.0)
            got = torch.nan_to_num(got, nan=0.0)[0].tolist()  # 0/0 where std = 0: the brute force's 0
            # float64 on both sides; the brute force sums over C(n, k) subsets.
            assert_close_up_to_rounding(got, _pass_at_k_brute_force(rewards, k), terms=math.comb(n, k),
                                        dtype=torch.float64, msg=f"n={n} c={c} k={k}")


def test_pass_at_1_is_grpo_and_k_above_the_group_is_the_whole_group():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0], [1.0, 0.0, math.nan, 0.0, 0.0]])
    grpo = compute_advantages(rewards, "grpo", eps=0.0)
    pass_1 = compute_advantages(rewards, "pass_at_k", k=1, eps=0.0)
    assert pass_1.flatten().tolist() == pytest.approx(grpo.flatten().tolist())
    # k = 5 on the second group's 4 scorable samples: k_ = 4, the only subset passes: std 0 -> 0
    assert compute_advantages(rewards, "pass_at_k", k=5)[1].abs().max().item() == 0.0


# -- MaxRL -----------------------------------------------------------------------------------------

def test_maxrl_hand_worked():
    # [1, 0, 0, 0]: p_hat = 1/4 -> A = r / p_hat - 1 = [3, -1, -1, -1]; all wrong -> 0; all correct -> 0
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0] * 4, [1.0] * 4])
    assert compute_advantages(rewards, "maxrl").flatten().tolist() == pytest.approx([3, -1, -1, -1] + [0] * 8)


def test_maxrl_expected_gradient_by_enumerating_outcomes():
    """A one-step policy over 3 answers (answer 0 correct), n = 3 samples: enumerate all 27 outcomes.
    The loss's gradient is (1/n) sum_i A_i grad log pi(y_i). Its expectation, centred, is
    [(1 - (1-p)^n) / p - (1-p)^(n-1)] grad p; the uncentred part (A_i + 1 on groups with a correct
    sample) is exactly grad T_n(p), T_n = -sum_{k<=n} (1-p)^k / k, the truncated log p."""
    n = 3
    theta = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    logpi = torch.log_softmax(theta, 0)
    probs = logpi.exp().detach()
    p = probs[0]
    centred = torch.zeros(3, dtype=torch.float64)
    uncentred = torch.zeros(3, dtype=torch.float64)
    for ys in itertools.product(range(3), repeat=n):
        weight = math.prod(probs[y].item() for y in ys)
        rewards = torch.tensor([[1.0 if y == 0 else 0.0 for y in ys]], dtype=torch.float64)
        adv = compute_advantages(rewards, "maxrl", eps=0.0)[0]
        raw = (adv + 1.0) * (rewards.sum() > 0)
        for a, acc in ((adv, centred), (raw, uncentred)):
            surrogate = sum(a[i] * logpi[y] for i, y in enumerate(ys)) / n
            (g,) = torch.autograd.grad(surrogate, theta, retain_graph=True)
            acc += weight * g
    grad_p = probs[0] * (torch.eye(3, dtype=torch.float64)[0] - probs)  # d softmax_0 / d theta
    want = ((1 - (1 - p) ** n) / p - (1 - p) ** (n - 1)) * grad_p
    # float64; 27 outcomes, each a sum over n = 3 samples of a softmax over 3 answers.
    assert_close_up_to_rounding(centred, want, terms=27 * n * 3)
    theta_t = theta.detach().clone().requires_grad_(True)
    p_t = torch.softmax(theta_t, 0)[0]
    (grad_t,) = torch.autograd.grad(-sum((1 - p_t) ** k / k for k in range(1, n + 1)), theta_t)
    assert_close_up_to_rounding(uncentred, grad_t, terms=27 * n * 3)


# -- KL placement ----------------------------------------------------------------------------------

def test_k1_in_the_reward_is_a_detached_reward_to_go_penalty():
    # beta = 0.5, k1 = log pi - log pi_ref = [1, 0.5]; sum from t on: [1.5, 0.5];
    # A_t = 1 - 0.5 * [1.5, 0.5] = [0.25, 0.75]. Ratio 1: loss = -(0.25 + 0.75) / 2 = -0.5,
    # d loss / d log pi_t = -A_t / 2 = [-0.125, -0.375]: no gradient through the KL itself
    assert reward_to_go(torch.tensor([[1.0, 0.5, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]])).tolist() == [[1.5, 0.5, 0.0]]
    logp = torch.zeros(1, 2, requires_grad=True)
    out = grpo_loss(logp, logp.detach(), torch.tensor([[-1.0, -0.5]]), torch.tensor([1.0]), torch.ones(1, 2),
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2),
                               kl=KLConfig(beta=0.5, estimator="k1", placement="reward")))
    (g,) = torch.autograd.grad(out.loss, logp)
    assert out.loss.item() == pytest.approx(-0.5) and g[0].tolist() == pytest.approx([-0.125, -0.375])
    assert out.kl == pytest.approx(0.75)


@pytest.mark.parametrize(("estimator", "placement", "target"), [
    ("k1", "reward", "reverse"),   # E_pi[k1 grad log pi] = grad KL(pi || pi_ref)
    ("k2", "loss", "reverse"),     # grad k2 = (log pi - log pi_ref) grad log pi: the same expectation
    ("k3", "loss", "forward"),     # grad k3 = (1 - pi_ref/pi) grad log pi; E_pi = -E_ref[grad log pi] = grad KL(pi_ref || pi)
    ("k1", "loss", "zero"),        # grad k1 = grad log pi, E_pi = 0
])
def test_on_policy_expected_kl_gradient_of_each_placement(estimator, placement, target):
    """One token from a 4-word vocabulary, ratio 1, A = 0: E_{y ~ pi}[grad loss(y)] by enumeration
    against the gradient of the divergence each placement optimises (docs/grpo.md)."""
    theta = torch.tensor([0.2, -0.4, 0.9, 0.0], dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.tensor([0.5, 0.1, -0.3, 0.2], dtype=torch.float64), 0)
    logpi = torch.log_softmax(theta, 0)
    expected = torch.zeros(4, dtype=torch.float64)
    magnitude = torch.zeros(4, dtype=torch.float64)  # sum |p(y) g_y|: the terms' size, when they cancel to 0
    for y in range(4):
        lp = logpi[y].view(1, 1)
        out = grpo_loss(lp, lp.detach(), ref[y].view(1, 1), torch.zeros(1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                        LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2),
                                   kl=KLConfig(beta=1.0, estimator=estimator, placement=placement)))
        (g,) = torch.autograd.grad(out.loss, theta, retain_graph=True)
        expected += logpi[y].exp().detach() * g
        magnitude += (logpi[y].exp().detach() * g).abs()
    t = theta.detach().clone().requires_grad_(True)
    lt = torch.log_softmax(t, 0)
    divergence = {"reverse": (lt.exp() * (lt - ref)).sum(), "forward": (ref.exp() * (ref - lt)).sum(),
                  "zero": 0.0 * lt.sum()}[target]
    (want,) = torch.autograd.grad(divergence, t)
    # float64; both sides sum 4 outcomes' terms of a few operations each (a log-softmax over 4, the loss's
    # ratio, clip and KL): 4 x 8 terms at the scale of the summed terms (the "zero" target sums them to 0).
    assert_close_up_to_rounding(expected, want, terms=4 * 8, dtype=torch.float64, scale=float(magnitude.max()))


# -- config ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("changes", "message"), [
    ({"policy_loss.name": "ppo2"}, "algo.policy_loss.name='ppo2' is unknown"),
    ({"policy_loss.name": "cispo", "policy_loss.ratio_level": "sequence"}, "takes per-token ratios"),
    ({"policy_loss.dual_clip_c": 0.5}, "algo.policy_loss.dual_clip_c must be 0 (off) or > 1"),
    ({"kl.placement": "reward"}, "set algo.kl.estimator=k1"),
    ({"kl.placement": "advantage"}, "algo.kl.placement='advantage' is unknown"),
    ({"advantage.estimator": "pass_at_k", "advantage.pass_k": 16}, "algo.advantage.pass_k=16 exceeds algo.group_size=8"),
    ({"entropy_control.name": "kl_cov"}, "algo.entropy_control.name=kl_cov does nothing with algo.num_iterations=1"),
])
def test_config_problems_name_the_setting_and_the_fix(changes, message):
    problems = set_settings(GRPOConfig(), changes).problems()
    assert any(message in p for p in problems), problems


def test_each_estimator_gets_only_the_settings_it_takes():
    available = {"eps": 1e-6, "std": "population", "k": 4, "positive_weight": 0.1}
    assert advantage_options("pass_at_k", available) == {"eps": 1e-6, "k": 4}
    assert advantage_options("w_reinforce", available) == {"positive_weight": 0.1}
    assert advantage_options("grpo", available) == {"eps": 1e-6, "std": "population"}


# -- cross-check: the formulas as verl's core_algos.py states them, on random float64 tensors --------

def _random_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(6, 7, generator=g, dtype=torch.float64) * 3
    logp = (old + torch.randn(6, 7, generator=g, dtype=torch.float64) * 1.5).requires_grad_(True)  # ratios up to ~e^4
    ref = old + torch.randn(6, 7, generator=g, dtype=torch.float64) * 8  # log-ratios past verl's clamps
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    mask = (torch.arange(7) < torch.tensor([7, 5, 3, 7, 1, 6]).unsqueeze(-1)).double()
    return logp, old, ref, adv, mask


def _token_mean(x, mask):
    return (x * mask).sum() / mask.sum()


def _check(ours, theirs, logp):
    (g1,) = torch.autograd.grad(ours, logp, retain_graph=True)
    (g2,) = torch.autograd.grad(theirs, logp)
    # float64, two formulas of one loss over the batch's 6 x 7 tokens (tests/conftest.py's rule).
    assert_close_up_to_rounding(ours, theirs, terms=6 * 7)
    assert_close_up_to_rounding(g1, g2, terms=6 * 7)


def test_dual_clip_and_clamped_k3_match_verls_formulas():
    logp, old, ref, adv, mask = _random_batch()
    ours = grpo_loss(logp, old, ref, adv, mask,
                     LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.28, dual_clip_c=3.0, log_ratio_clamp=20.0),
                                kl=KLConfig(beta=0.1, clamp=10.0), aggregation="token_mean")).loss
    a = adv.unsqueeze(-1)
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    loss1, loss2 = -a * ratio, -a * torch.clamp(ratio, 0.8, 1.28)
    clip1 = torch.maximum(loss1, loss2)
    pg = torch.where(a < 0, torch.minimum(-a * 3.0, clip1), clip1)
    kl = torch.clamp(ref - logp, -20, 20)
    k3 = torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
    _check(ours, _token_mean(pg + 0.1 * k3, mask), logp)


def test_cispo_and_gmpo_match_verls_formulas():
    logp, old, _, adv, mask = _random_batch(1)
    a = adv.unsqueeze(-1)
    ours = grpo_loss(logp, old, None, adv, mask,
                     LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.28, name="cispo"),
                                kl=KLConfig(beta=0.0), aggregation="token_mean")).loss
    ratio = torch.exp(logp - old)
    _check(ours, _token_mean(-torch.clamp(ratio, 0.8, 1.28).detach() * a * logp, mask), logp)
    ours = grpo_loss(logp, old, None, adv, mask,
                     LossGroups(policy=PolicyLossConfig(eps_low=0.4, eps_high=0.4, name="gmpo"),
                                kl=KLConfig(beta=0.0))).loss
    sgn = torch.sign(a)
    log_ratio = logp - old
    pessimistic = sgn * torch.minimum(sgn * log_ratio, sgn * torch.clamp(log_ratio, -0.4, 0.4))
    seq_ratio = torch.exp((pessimistic * mask).sum(-1) / mask.sum(-1))
    _check(ours, (-adv * seq_ratio).mean(), logp)


# -- end to end: each preset's settings train on the tiny model -----------------------------------

@pytest.mark.parametrize("settings", [
    {"policy_loss.name": "cispo", "num_iterations": 2, "loss_aggregation": "token_mean"},
    {"policy_loss.name": "gmpo", "policy_loss.eps_low": 0.4, "policy_loss.eps_high": 0.4, "num_iterations": 2},
    {"policy_loss.dual_clip_c": 3.0, "policy_loss.log_ratio_clamp": 20.0, "kl.clamp": 10.0, "num_iterations": 2},
    {"advantage.estimator": "w_reinforce", "advantage.positive_weight": 0.0},
    {"advantage.estimator": "pass_at_k", "advantage.pass_k": 2},
    {"advantage.estimator": "maxrl"},
    {"kl.placement": "reward", "kl.estimator": "k1"},
    {"entropy_control.name": "clip_cov", "entropy_control.fraction": 0.05, "entropy_control.cov_low": -1e9, "entropy_control.cov_high": 1e9},
    {"entropy_control.name": "kl_cov", "entropy_control.fraction": 0.05, "num_iterations": 2},
    {"entropy_control.name": "high_entropy"},
], ids=["cispo", "gmpo", "dual_clip", "nsr", "passk", "maxrl", "kl_in_reward", "clip_cov", "kl_cov", "80_20"])
def test_each_objective_trains_two_steps_with_documented_finite_metrics(small_cfg, tmp_path, settings):
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer
    from tests.reasoning_rl.documented_metrics import undocumented

    assert set_settings(small_cfg.algo, settings).problems() == []
    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(metrics) == 2
    for m in metrics:
        for key in ("loss/total", "loss/policy", "kl/mean", "ratio/mean", "grad/norm"):
            assert math.isfinite(m[key]), key
        assert undocumented(m) == []
        assert math.isfinite(m["cov/logp_advantage"]) and math.isfinite(m["entropy/decile_0"])
    assert ("clip/dual_fraction" in metrics[0]) == bool(settings.get("policy_loss.dual_clip_c"))
