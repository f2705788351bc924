"""Advantage estimators: rewards of G completions per prompt -> one advantage per completion.

Every estimator takes ``rewards`` of shape ``[B, G]`` (B prompts, G completions
each) where NaN marks a completion whose reward is ``None`` (unscorable). Such a
completion is left out of its group's statistics and gets advantage 0, so it
neither pushes nor pulls the policy. Estimators are pure functions selected by
name from :data:`ADVANTAGE_ESTIMATORS`; adding one is one function and one line.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

AdvantageFn = Callable[..., torch.Tensor]

STD_MODES = ("population", "unbiased", "batch", "batch_unbiased", "none")
"""The scales ``grpo_advantages`` divides by (see its docstring)."""


def _group_mean(rewards: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over the valid entries of each row, and the count of valid entries. # [B, 1] each"""
    count = valid.sum(dim=1, keepdim=True)  # [B, 1]
    total = torch.where(valid, rewards, 0.0).sum(dim=1, keepdim=True)  # [B, 1]
    return total / count.clamp(min=1), count


def group_std(rewards: torch.Tensor, valid: torch.Tensor, unbiased: bool = False) -> torch.Tensor:
    """Per-group standard deviation over valid entries. # [B, 1]

    population: sqrt( sum_i (r_i - mean)^2 / n )       (default; the paper's worked example)
    unbiased:   sqrt( sum_i (r_i - mean)^2 / (n - 1) ) (what TRL and verl use)
    """
    mean, count = _group_mean(rewards, valid)
    sq = torch.where(valid, (rewards - mean) ** 2, 0.0).sum(dim=1, keepdim=True)  # [B, 1]
    denom = (count - 1).clamp(min=1) if unbiased else count.clamp(min=1)
    return (sq / denom).sqrt()


def grpo_advantages(
    rewards: torch.Tensor, eps: float = 1e-6, std: str = "population"
) -> torch.Tensor:
    """Group-relative advantage, DeepSeekMath (arXiv 2402.03300, sec. 4.1.2, outcome supervision).

        A_i = (r_i - mean(r)) / (std(r) + eps)

    over the G completions of the same prompt. ``std`` selects the scale:
    ``population`` (default), ``unbiased`` (n - 1, as TRL and verl), ``batch`` /
    ``batch_unbiased`` (one std over every valid reward of the batch, as in Dr. GRPO's
    discussion / REINFORCE++), or ``none`` (no scaling: Dr. GRPO, arXiv 2503.20783).

    ``eps`` defaults to 1e-6 (TRL adds 1e-4): it only matters for groups whose std is
    tiny but not 0, e.g. rewards [1, 1, 1, 0.999]; a group of equal rewards gets 0 either way.

    Worked example (G=4): r = [1, 0, 1, 0] -> mean 0.5, std 0.5 -> A = [+1, -1, +1, -1].
    A group whose rewards are all equal gets zero advantages.
    """
    valid = ~torch.isnan(rewards)  # [B, G]
    mean, _ = _group_mean(rewards, valid)  # [B, 1]
    centred = torch.where(valid, rewards - mean, 0.0)  # [B, G]
    if std == "none":
        return centred
    if std == "population":
        scale = group_std(rewards, valid, unbiased=False)
    elif std == "unbiased":
        scale = group_std(rewards, valid, unbiased=True)
    elif std in ("batch", "batch_unbiased"):
        flat = rewards[valid]
        unbiased = std == "batch_unbiased"
        scale = flat.std(unbiased=unbiased) if flat.numel() > int(unbiased) else torch.tensor(0.0)
    else:
        raise ValueError(f"unknown std mode {std!r}; expected one of {list(STD_MODES)}")
    return centred / (scale + eps)


def dr_grpo_advantages(rewards: torch.Tensor, eps: float = 1e-6, std: str = "none") -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): A_i = r_i - mean(r), no std division,
    which removes the question-difficulty bias of GRPO's normalisation."""
    return grpo_advantages(rewards, eps=eps, std="none")


def rloo_advantages(rewards: torch.Tensor, eps: float = 1e-6, std: str = "none") -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740): leave-one-out baseline.

        A_i = r_i - (1 / (n - 1)) * sum_{j != i} r_j  =  n / (n - 1) * (r_i - mean(r))

    with n the number of valid completions in the group (0 when n < 2).
    """
    valid = ~torch.isnan(rewards)
    mean, count = _group_mean(rewards, valid)
    factor = torch.where(count > 1, count / (count - 1).clamp(min=1), 0.0)  # [B, 1]
    return torch.where(valid, (rewards - mean) * factor, 0.0)


def reinforce_pp_advantages(rewards: torch.Tensor, eps: float = 1e-6, std: str = "batch") -> torch.Tensor:
    """REINFORCE++ with a group baseline (Hu et al. 2025, arXiv 2501.03262, sec. 3.2):
    subtract each group's mean, then normalise over the whole batch:

        A'_i = r_i - mean(group(i))        A_i = (A'_i - mean_batch(A')) / (std_batch(A') + eps)

    over valid (scorable) samples; an unscorable sample gets 0."""
    valid = ~torch.isnan(rewards)
    centred = grpo_advantages(rewards, std="none")  # [B, G], 0 where invalid
    flat = centred[valid]
    if flat.numel() < 2:
        return torch.zeros_like(centred)
    return torch.where(valid, (centred - flat.mean()) / (flat.std(unbiased=False) + eps), 0.0)


def w_reinforce_advantages(rewards: torch.Tensor, positive_weight: float = 0.1, **_: object) -> torch.Tensor:
    """W-REINFORCE (Zhu et al. 2025, "The Surprising Effectiveness of Negative Reinforcement in LLM
    Reasoning", arXiv 2506.01347): L = lambda * L_PSR + L_NSR, REINFORCE on +1 / -1 rewards with the
    positive samples down-weighted by lambda (``positive_weight``, 0.1 in the paper). No baseline:

        A_i = lambda * r_i - (1 - r_i)        (r_i in [0, 1]: lambda if correct, -1 if wrong)

    ``lambda = 0`` is NSR, negative-sample reinforcement alone: only wrong samples are pushed down.
    An all-correct group still gets lambda per sample (GRPO's gives it 0); unscorable samples get 0."""
    valid = ~torch.isnan(rewards)
    return torch.where(valid, positive_weight * rewards - (1.0 - rewards), 0.0)


def _binom(n: torch.Tensor, k: int) -> torch.Tensor:
    """C(n, k) elementwise for integer-valued float ``n`` (0 when n < k), via lgamma."""
    if k < 0:
        return torch.zeros_like(n)
    ok = n >= k
    safe = torch.where(ok, n, torch.full_like(n, float(k)))
    value = torch.exp(torch.lgamma(safe + 1) - torch.lgamma(torch.tensor(k + 1.0, dtype=n.dtype))
                      - torch.lgamma(safe - k + 1))
    return torch.where(ok, torch.round(value), torch.zeros_like(n))


def pass_at_k_advantages(rewards: torch.Tensor, k: int = 4, eps: float = 1e-6, **_: object) -> torch.Tensor:
    """Pass@k training's analytic advantage (Chen et al. 2025, arXiv 2508.10751, sec. 4).

    Split a group of n samples (c correct: reward >= 1) into every k-subset; a subset scores
    max_j r_j (1 if any is correct). Its group statistics and each sample's advantage, the mean over
    the subsets holding it of (subset score - mean) / std, have a closed form (k_ = min(k, n)):

        R     = 1 - C(n - c, k_) / C(n, k_)                         mean subset score = pass@k
        sigma = sqrt(R * (1 - R))                                   std of the 0/1 subset scores
        A_correct = (1 - R) / (sigma + eps)                         every subset with it passes
        A_wrong   = (1 - R - C(n - c - 1, k_ - 1) / C(n - 1, k_ - 1)) / (sigma + eps)

    (a wrong sample's subsets fail only when its k_ - 1 companions are all wrong). At k = 1 this is
    GRPO's advantage; an all-correct or all-wrong group gets 0. Tested against enumerating the
    k-subsets. n counts the scorable samples; unscorable ones get 0."""
    valid = ~torch.isnan(rewards)
    r = torch.where(valid, rewards, 0.0).double()
    n = valid.sum(dim=1, keepdim=True).double()  # [B, 1]
    correct = (r >= 1.0) & valid  # [B, G]
    c = correct.sum(dim=1, keepdim=True).double()  # [B, 1]
    kk = torch.clamp(n, max=float(k))  # k_ = min(k, n)  # [B, 1]
    out = torch.zeros_like(r)
    for ki in sorted({int(v) for v in kk.flatten().tolist()}):
        if ki < 1:
            continue
        rows = (kk == ki)  # [B, 1]
        pass_k = 1.0 - _binom(n - c, ki) / _binom(n, ki)  # [B, 1]
        sigma = torch.sqrt(pass_k * (1.0 - pass_k))
        # a wrong sample's subsets all fail with probability C(n-c-1, k-1) / C(n-1, k-1)
        fail_with = _binom(n - c - 1, ki - 1) / _binom(n - 1, ki - 1).clamp(min=1)
        a_correct = (1.0 - pass_k) / (sigma + eps)  # [B, 1]
        a_wrong = (1.0 - pass_k - fail_with) / (sigma + eps)  # [B, 1]
        adv = torch.where(correct, a_correct, a_wrong)  # [B, G]
        out = torch.where(rows & valid, adv, out)
    return out.to(rewards.dtype)


def maxrl_advantages(rewards: torch.Tensor, eps: float = 1e-6, **_: object) -> torch.Tensor:
    """MaxRL (arXiv 2602.02710): aim at log p(correct | q) instead of p. With n samples and K correct,
    grad log p = grad p / p is estimated by the mean over the CORRECT samples,

        g = 1/K sum_{i: r_i = 1} grad log pi(o_i)   (0 when K = 0)

    whose expectation is exactly grad T_n(p), T_n(p) = -sum_{k=1..n} (1 - p)^k / k, the Taylor
    truncation of log p (T_n -> log p as n grows): the prompt's gradient is reweighted by
    (1 - (1 - p)^n) / p, about 1/p. We centre it with the group's mean score-function term, which
    the loss's 1/n average turns into the advantage

        A_i = r_i / p_hat - 1 = n r_i / K - 1   (K >= 1),       A_i = 0   (K = 0)

    i.e. GRPO's (r - mean) divided by mean(r) instead of std(r). The centring keeps the variance
    down at a bias of -(1 - p)^(n-1) grad p (it is dropped with the all-wrong groups); both
    expectations are tested by enumerating outcomes. Rewards are treated as p_hat = mean(r) with
    r in [0, 1]; unscorable samples get 0."""
    valid = ~torch.isnan(rewards)
    mean, _ = _group_mean(rewards, valid)  # p_hat  # [B, 1]
    adv = torch.where(mean > eps, rewards / mean.clamp(min=eps) - 1.0, 0.0)
    return torch.where(valid, adv, 0.0)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "reinforce_pp": reinforce_pp_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "w_reinforce": w_reinforce_advantages,
    "pass_at_k": pass_at_k_advantages,
    "maxrl": maxrl_advantages,
}


def compute_advantages(rewards: torch.Tensor, estimator: str = "grpo", **options: object) -> torch.Tensor:
    """Dispatch to the estimator named ``estimator`` (see :data:`ADVANTAGE_ESTIMATORS`)."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; expected one of {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[estimator](rewards, **options)


def advantage_options(estimator: str, available: dict[str, object]) -> dict[str, object]:
    """The subset of ``available`` (every advantage setting of the config) that the estimator named
    ``estimator`` takes as keyword arguments: ``k`` goes to pass_at_k only, ``std`` to grpo only."""
    params = inspect.signature(ADVANTAGE_ESTIMATORS[estimator]).parameters
    return {k: v for k, v in available.items() if k in params}


@dataclass
class AdvantageConfig:
    """The advantage estimator and its options (``algo.advantage``; verl's ``algorithm.adv_estimator``
    with its norm settings). An option is read only by the estimators whose signature names it."""

    estimator: str = "grpo"
    """:data:`ADVANTAGE_ESTIMATORS`: grpo, dr_grpo, rloo, reinforce_pp, w_reinforce (NSR / W-REINFORCE),
    pass_at_k, maxrl."""
    std: str = "population"
    """GRPO's scale: population (paper's worked example), unbiased (TRL/verl), batch, batch_unbiased, none."""
    eps: float = 1e-6
    """eps in A_i = (r_i - mean) / (std + eps) (TRL uses 1e-4; docs/grpo.md)."""
    pass_k: int = 4
    """k of the pass@k advantage (estimator=pass_at_k); k = 1 is GRPO's advantage."""
    positive_weight: float = 0.1
    """W-REINFORCE's lambda, the weight of correct samples (estimator=w_reinforce; 0 = NSR alone)."""

    def problems(self, group_size: int) -> list[str]:
        out = []
        if self.estimator not in ADVANTAGE_ESTIMATORS:
            out.append(f"algo.advantage.estimator={self.estimator!r} is unknown; "
                       f"choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
        if self.std not in STD_MODES:
            out.append(f"algo.advantage.std={self.std!r} is unknown; choose one of {', '.join(STD_MODES)}")
        if self.estimator == "pass_at_k" and self.pass_k > group_size:
            out.append(f"algo.advantage.pass_k={self.pass_k} exceeds algo.group_size={group_size}: a group has no "
                       f"{self.pass_k}-subsets; lower algo.advantage.pass_k or raise algo.group_size")
        return out

    def __call__(self, rewards: torch.Tensor) -> torch.Tensor:
        """The estimator's advantages of ``rewards`` [B, G], with the options its signature names
        (k: pass_at_k only, std: grpo's scale).  # [B, G]"""
        options = advantage_options(self.estimator, {"eps": self.eps, "std": self.std, "k": self.pass_k,
                                                     "positive_weight": self.positive_weight})
        return compute_advantages(rewards, self.estimator, **options)


def zero_std_fraction(rewards: torch.Tensor, tol: float = 1e-8) -> float:
    """Fraction of groups whose valid rewards are all equal (they give no learning signal)."""
    valid = ~torch.isnan(rewards)
    std = group_std(rewards, valid)
    return float((std.squeeze(1) <= tol).float().mean())
