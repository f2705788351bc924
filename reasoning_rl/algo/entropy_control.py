"""Which tokens carry the policy gradient: entropy control by covariance and the 80/20 rule.

Cui et al. 2025 ("The Entropy Mechanism of RL for Reasoning Language Models", arXiv 2505.22617)
show that the policy's entropy falls in proportion to the covariance between a token's
log-probability and its advantage, and act on the few tokens where that covariance is largest:

    Cov_t = (log pi_t - mean(log pi)) * (A_t - mean(A))           (means over the tokens, detached)

    Clip-Cov: among the tokens with cov_low <= Cov_t <= cov_high, pick ``fraction`` of all tokens
              at random and detach their policy gradient (paper: fraction 2e-4, bounds 1 and 5)
    KL-Cov:   on the top ``fraction`` of tokens by Cov_t add  coef * |log pi_t - log pi_old_t|
              to the loss (paper: fraction 2e-3, coef 1)

Wang et al. 2025 ("Beyond the 80/20 Rule", arXiv 2506.01939) keep the policy gradient on the
top 20% highest-entropy tokens ("forking tokens") only.

Each is a function ``(per_token_loss, LossTokens, EntropyControlConfig) -> per_token_loss`` in
:data:`ENTROPY_CONTROLS`, applied to the policy term before the KL is added. The statistics are
taken over ONE micro-batch's tokens (the paper's implementation does the same on its micro-batch),
so the selection depends on ``algo.micro_batch_size``; at least one token is selected whenever the
fraction is > 0. The aggregation's denominators are the batch's, unchanged: with the 80/20 rule the
gradient is 0.2 x that of a token mean over the kept tokens only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from reasoning_rl.algo.loss_tokens import LossTokens


@dataclass
class EntropyControlConfig:
    """Which tokens keep the policy gradient, and the options of each rule (``algo.entropy_control``;
    verl puts these under ``policy_loss``: clip_cov / kl_cov loss modes)."""

    name: str = "none"
    """none, clip_cov, kl_cov (arXiv 2505.22617) or high_entropy (the 80/20 rule, arXiv 2506.01939):
    :data:`ENTROPY_CONTROLS`."""
    fraction: float = 2e-4
    """Clip-Cov / KL-Cov: share of a micro-batch's tokens acted on (paper: 2e-4 Clip-Cov, 2e-3 KL-Cov)."""
    cov_low: float = 1.0
    """Clip-Cov: lowest covariance (log pi_t - mean)(A_t - mean) of a token it may detach."""
    cov_high: float = 5.0
    """Clip-Cov: highest covariance of a token it may detach."""
    kl_coef: float = 1.0
    """KL-Cov: weight of |log pi - log pi_old| on its selected tokens."""
    top_fraction: float = 0.2
    """80/20 rule: share of a micro-batch's tokens, highest entropy first, that keep the policy gradient."""

    def problems(self, num_iterations: int) -> list[str]:
        out = []
        if self.name not in ENTROPY_CONTROLS:
            out.append(f"algo.entropy_control.name={self.name!r} is unknown; "
                       f"choose one of {', '.join(ENTROPY_CONTROLS)}")
        if self.name == "kl_cov" and num_iterations == 1:
            # With one update per batch pi_old is pi_theta detached: |log pi - log pi_old| is 0 with gradient 0.
            out.append("algo.entropy_control.name=kl_cov does nothing with algo.num_iterations=1 (its penalty "
                       "|log pi - log pi_old| is 0 when each batch is used once); set algo.num_iterations=2 or more")
        if self.cov_low > self.cov_high:
            out.append(f"algo.entropy_control.cov_low={self.cov_low} is above algo.entropy_control.cov_high="
                       f"{self.cov_high}: no token could be picked; swap them")
        return out


def token_covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cov_t = (log pi_t - mean(log pi)) * (A_t - mean(A)), means over the masked tokens; detached,
    0 on padding. Its token mean is Cov(log pi, A), the quantity entropy falls with.  # [B, L]"""
    keep = mask.bool()
    # Padding selected out (torch.where, as aggregation.masked_sum: a non-finite pad value times 0 is NaN).
    logp = torch.where(keep, logp.detach(), torch.zeros_like(logp))
    adv = torch.where(keep, advantages.detach().expand_as(logp), torch.zeros_like(logp))
    n = mask.sum().clamp(min=1)
    centred_logp = logp - logp.sum() / n
    centred_adv = adv - adv.sum() / n
    return torch.where(keep, centred_logp * centred_adv, torch.zeros_like(logp))


def _count(fraction: float, mask: torch.Tensor) -> int:
    """round(fraction * tokens), at least 1 when fraction > 0."""
    return 0 if fraction <= 0 else max(1, round(fraction * float(mask.sum())))


def _top(scores: torch.Tensor, eligible: torch.Tensor, count: int) -> torch.Tensor:
    """bool [B, L]: the ``count`` eligible positions with the largest scores."""
    flat = torch.where(eligible, scores, torch.full_like(scores, -torch.inf)).flatten()
    count = min(count, int(eligible.sum()))
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    if count > 0:
        chosen[torch.topk(flat, count).indices] = True
    return chosen.view_as(scores)


def no_control(per_token: torch.Tensor, ctx: LossTokens, ec: EntropyControlConfig) -> torch.Tensor:
    """Every token keeps its policy gradient (GRPO)."""
    return per_token


def clip_cov(per_token: torch.Tensor, ctx: LossTokens, ec: EntropyControlConfig) -> torch.Tensor:
    """Clip-Cov: detach the policy gradient of ``fraction`` of the tokens, drawn uniformly from those
    with cov_low <= Cov_t <= cov_high (torch's global generator, seeded by the run)."""
    cov = token_covariance(ctx.logp, ctx.advantages, ctx.mask)
    eligible = ctx.mask.bool() & (cov >= ec.cov_low) & (cov <= ec.cov_high)
    random_scores = torch.rand(cov.shape, dtype=torch.float64).to(cov.device)
    chosen = _top(random_scores, eligible, _count(ec.fraction, ctx.mask))
    return torch.where(chosen, per_token.detach(), per_token)


def kl_cov(per_token: torch.Tensor, ctx: LossTokens, ec: EntropyControlConfig) -> torch.Tensor:
    """KL-Cov: + kl_coef * |log pi - log pi_old| on the top ``fraction`` of tokens by Cov_t."""
    cov = token_covariance(ctx.logp, ctx.advantages, ctx.mask)
    chosen = _top(cov, ctx.mask.bool(), _count(ec.fraction, ctx.mask))
    penalty = ec.kl_coef * (ctx.logp - ctx.old_logp).abs()
    return torch.where(chosen, per_token + penalty, per_token)


def high_entropy_tokens(per_token: torch.Tensor, ctx: LossTokens, ec: EntropyControlConfig) -> torch.Tensor:
    """The 80/20 rule: only the top ``top_fraction`` share of tokens by entropy keep the policy gradient."""
    if ctx.entropy is None:
        raise ValueError("entropy control high_entropy needs the per-token entropy (pass entropy= to grpo_loss)")
    keep = _top(ctx.entropy.detach(), ctx.mask.bool(), _count(ec.top_fraction, ctx.mask))
    return torch.where(keep, per_token, per_token.detach())


ENTROPY_CONTROLS: dict[str, Callable[[torch.Tensor, LossTokens, EntropyControlConfig], torch.Tensor]] = {
    "none": no_control,
    "clip_cov": clip_cov,
    "kl_cov": kl_cov,
    "high_entropy": high_entropy_tokens,
}
"""``algo.entropy_control.name`` -> ``(per-token policy loss, LossTokens, EntropyControlConfig) -> per-token loss``."""


def position_deciles(mask: torch.Tensor) -> torch.Tensor:
    """Each token's decile of its completion by relative position t / (|o_i| - 1), so the first token is
    in decile 0 and the last in decile 9 whatever the length: min(9, floor(10 t / (|o_i| - 1))); -1 on
    padding. A 5-token completion's tokens fall in deciles 0, 2, 5, 7, 9; a 1-token one's in 0.  # [B, L] long"""
    last = (mask.sum(-1, keepdim=True) - 1).clamp(min=1)  # |o_i| - 1  # [B, 1]
    t = torch.cumsum(mask, -1) - 1  # the token's index within its completion  # [B, L]
    deciles = torch.div(10 * t, last, rounding_mode="floor").long().clamp(max=9)
    return torch.where(mask.bool(), deciles, torch.full_like(deciles, -1))
