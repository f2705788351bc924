"""Advantage estimators: rewards of G completions per prompt -> one advantage per completion.

Every estimator takes ``rewards`` of shape ``[B, G]`` (B prompts, G completions
each) where NaN marks a completion whose reward is ``None`` (unscorable). Such a
completion is left out of its group's statistics and gets advantage 0, so it
neither pushes nor pulls the policy. Estimators are pure functions selected by
name from :data:`ADVANTAGE_ESTIMATORS`; adding one is one function and one line.
"""

from __future__ import annotations

from collections.abc import Callable

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


ADVANTAGE_ESTIMATORS: dict[str, AdvantageFn] = {
    "reinforce_pp": reinforce_pp_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
}


def compute_advantages(rewards: torch.Tensor, estimator: str = "grpo", **options: object) -> torch.Tensor:
    """Dispatch to the estimator named ``estimator`` (see :data:`ADVANTAGE_ESTIMATORS`)."""
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; expected one of {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[estimator](rewards, **options)


def zero_std_fraction(rewards: torch.Tensor, tol: float = 1e-8) -> float:
    """Fraction of groups whose valid rewards are all equal (they give no learning signal)."""
    valid = ~torch.isnan(rewards)
    std = group_std(rewards, valid)
    return float((std.squeeze(1) <= tol).float().mean())
