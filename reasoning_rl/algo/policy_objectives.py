"""The policy term of the GRPO family's loss: PPO's clipped surrogate and the objectives that replace it,
one function per paper in a table (:data:`POLICY_LOSSES`, ``algo.policy_loss.name``), and their settings
group (:class:`PolicyLossConfig`). ``reasoning_rl.algo.losses.grpo_loss`` adds the KL term and aggregates.

    ratio_it = pi_theta(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)

Shapes: B = sequences in the micro-batch, L = completion tokens (padded); ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from reasoning_rl.algo.aggregation import masked_sum
from reasoning_rl.algo.loss_tokens import token_advantages


def policy_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """ratio = pi_theta / pi_old = exp(log pi_theta - log pi_old).  # [B, L]"""
    return torch.exp(logp - old_logp)


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """PPO's pessimistic surrogate (Schulman et al. 2017), per token.  # [B, L]

        surrogate = min( ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A )

    ``advantages`` is ``[B]`` (one per sequence, broadcast over tokens) or ``[B, L]`` (per token).
    ``eps_high > eps_low`` is DAPO's clip-higher (arXiv 2503.14476).
    """
    adv = token_advantages(advantages, ratio)  # [B, 1] or [B, L]
    unclipped = ratio * adv  # [B, L]
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv  # [B, L]
    return torch.minimum(unclipped, clipped)


def clipped_tokens(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                   eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the clip is the active branch of the surrogate's min(): (ratio < 1 - eps_low and A < 0,
    ratio > 1 + eps_high and A > 0). ``advantages`` broadcasts to ``ratio``.  # [B, L] bool each"""
    return (ratio < 1.0 - eps_low) & (advantages < 0), (ratio > 1.0 + eps_high) & (advantages > 0)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's (Zheng et al. 2025, arXiv 2507.18071) length-normalised sequence ratio, in log space,
    broadcast over the sequence's tokens:  log s_i = 1/|o_i| sum_t (log pi_theta - log pi_old).  # [B, L]"""
    per_seq = masked_sum(logp - old_logp, mask, dim=-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_seq.unsqueeze(-1).expand_as(logp)


# -- policy objectives: one function per paper, selected by ``algo.policy_loss.name`` --------------

@dataclass(frozen=True)
class PolicyTerms:
    """What a policy objective gives back, per token.  # [B, L] each"""

    objective: torch.Tensor
    """The term to maximise (the loss adds its negative)."""
    ratio: torch.Tensor
    """pi_theta / pi_old (for ``ratio/mean``)."""
    clip_low: torch.Tensor
    """bool: the objective's lower clip is active here."""
    clip_high: torch.Tensor
    """bool: the objective's upper clip is active here."""
    clip_dual: torch.Tensor
    """bool: dual-clip's bound c * A is active here (A < 0, ratio > c); False when dual-clip is off."""


@dataclass
class ClipRangeConfig:
    """PPO's clip range, the settings of every clipped policy objective (``algo.policy_loss``; PPO's
    whole group, GRPO's :class:`PolicyLossConfig` adds the objective and its options)."""

    eps_low: float = 0.2
    """Lower clip range: the ratio is clipped at 1 - eps_low."""
    eps_high: float = 0.2
    """Upper clip range: the ratio is clipped at 1 + eps_high (DAPO's clip-higher uses 0.28)."""

    def problems(self) -> list[str]:
        if not (0 <= self.eps_low < 1) or self.eps_high < 0:
            return [f"need 0 <= algo.policy_loss.eps_low < 1 and algo.policy_loss.eps_high >= 0, "
                    f"got {self.eps_low}, {self.eps_high}"]
        return []


@dataclass
class PolicyLossConfig(ClipRangeConfig):
    """The policy objective and its options (``algo.policy_loss``; verl's ``actor.policy_loss``)."""

    name: str = "clip"
    """:data:`POLICY_LOSSES`: clip (GRPO/PPO), cispo (MiniMax-M1's clipped, detached IS weight) or gmpo
    (geometric mean of log-clipped token ratios)."""
    dual_clip_c: float = 0.0
    """Dual-clip PPO's c (> 1; verl uses 3): for A < 0 the loss is capped at c * |A|; 0 = off (clip only)."""
    log_ratio_clamp: float = 0.0
    """Clamp log(pi_theta / pi_old) and log(pi_ref / pi_theta) to [-x, x] before exp() (verl: 20); 0 = off."""
    ratio_level: str = "token"
    """token (GRPO's per-token ratios) or sequence (GSPO, arXiv 2507.18071: one length-normalised ratio per
    sample; the clip objective only)."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.ratio_level not in ("token", "sequence"):
            out.append(f"algo.policy_loss.ratio_level={self.ratio_level!r} is unknown; choose token or sequence")
        if self.name not in POLICY_LOSSES:
            out.append(f"algo.policy_loss.name={self.name!r} is unknown; choose one of {sorted(POLICY_LOSSES)}")
        elif self.name != "clip" and (self.ratio_level != "token" or self.dual_clip_c):
            out.append(f"algo.policy_loss.name={self.name} takes per-token ratios and no dual clip; set "
                       f"algo.policy_loss.ratio_level=token and algo.policy_loss.dual_clip_c=0 "
                       f"(or algo.policy_loss.name=clip)")
        if self.dual_clip_c and self.dual_clip_c <= 1:
            out.append(f"algo.policy_loss.dual_clip_c must be 0 (off) or > 1 (verl uses 3), got {self.dual_clip_c}")
        return out


def _log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, o: PolicyLossConfig) -> torch.Tensor:
    """log pi_theta - log pi_old, clamped to [-c, c] when ``log_ratio_clamp = c > 0`` (verl's overflow
    guard; the clamp has no gradient, so a token past it stops moving).  # [B, L]"""
    log_ratio = logp - old_logp
    return log_ratio.clamp(-o.log_ratio_clamp, o.log_ratio_clamp) if o.log_ratio_clamp > 0 else log_ratio


def ppo_clip_objective(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                       o: PolicyLossConfig) -> PolicyTerms:
    """GRPO's / PPO's clipped surrogate (:func:`clipped_surrogate`), optionally dual-clipped
    (Ye et al. 2020, "Mastering Complex Control in MOBA Games", arXiv 1912.09729; verl's default c = 3):

        s = min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)
        s_dual = max(s, c * A)   where A < 0,     s elsewhere

    For A < 0 the plain surrogate -ratio * |A| is unbounded below as the ratio grows; dual-clip caps
    the loss at c * |A| and gives such a token no gradient (ratio > c)."""
    if o.ratio_level == "sequence":
        log_ratio = sequence_log_ratio(_log_ratio(logp, old_logp, o), torch.zeros_like(logp), mask)  # [B, L]
    else:
        log_ratio = _log_ratio(logp, old_logp, o)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L]
    adv = token_advantages(advantages, ratio)  # [B, 1] or [B, L]
    surrogate = clipped_surrogate(ratio, adv, o.eps_low, o.eps_high)  # [B, L]
    clip_low, clip_high = clipped_tokens(ratio, adv, o.eps_low, o.eps_high)
    dual = torch.zeros_like(clip_low)
    if o.dual_clip_c > 0:
        bound = o.dual_clip_c * adv  # [B, 1] or [B, L]
        dual = ((adv < 0) & (surrogate < bound)).expand_as(surrogate)
        surrogate = torch.where(adv < 0, torch.maximum(surrogate, bound), surrogate)
    return PolicyTerms(surrogate, ratio, clip_low, clip_high, dual)


def cispo_objective(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    o: PolicyLossConfig) -> PolicyTerms:
    """CISPO (MiniMax-M1, arXiv 2506.13585, eq. 4-5): clip the importance WEIGHT, never the token:

        J = sg( clip(ratio, 1 - eps_low, 1 + eps_high) ) * A * log pi_theta

    Its gradient is clip(ratio) * A * grad log pi_theta on every token: a token whose ratio left the
    clip range keeps its gradient (PPO's min() gives it none), with its weight truncated."""
    ratio = torch.exp(_log_ratio(logp, old_logp, o))  # [B, L]
    adv = token_advantages(advantages, ratio)
    weight = torch.clamp(ratio, 1.0 - o.eps_low, 1.0 + o.eps_high).detach()  # sg(clip(ratio))  # [B, L]
    objective = weight * adv * logp  # [B, L]
    return PolicyTerms(objective, ratio, ratio < 1.0 - o.eps_low, ratio > 1.0 + o.eps_high,
                       torch.zeros_like(ratio, dtype=torch.bool))


def gmpo_objective(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   o: PolicyLossConfig) -> PolicyTerms:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the geometric mean of the token ratios, each clipped
    in log space (eps_low / eps_high about 0.4 there), pessimistically by the sign of A as PPO does:

        l_t = sgn(A) * min( sgn(A) * log r_t, sgn(A) * clip(log r_t, -eps_low, eps_high) )
        J_i = exp( 1/|o_i| sum_t l_t ) * A_i            (the same value on each of o_i's tokens)

    A is the sequence's (the token mean of per-token advantages). Aggregate with ``sequence_mean``
    to get the paper's mean over sequences. One outlier token moves a geometric mean less than it
    moves the arithmetic mean of GRPO's token ratios."""
    log_ratio = _log_ratio(logp, old_logp, o)  # [B, L]
    adv = token_advantages(advantages, log_ratio).expand_as(log_ratio)  # [B, L]
    count = mask.sum(-1).clamp(min=1)  # [B]
    seq_adv = masked_sum(adv, mask, dim=-1) / count  # [B]
    sign = torch.sign(seq_adv).unsqueeze(-1)  # [B, 1]
    clipped = torch.clamp(log_ratio, -o.eps_low, o.eps_high)  # [B, L]
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)  # [B, L]
    geo_ratio = torch.exp(masked_sum(pessimistic, mask, dim=-1) / count)  # [B]
    objective = (geo_ratio * seq_adv).unsqueeze(-1).expand_as(log_ratio)  # [B, L]
    return PolicyTerms(objective, torch.exp(log_ratio), (log_ratio < -o.eps_low) & (sign < 0),
                       (log_ratio > o.eps_high) & (sign > 0), torch.zeros_like(log_ratio, dtype=torch.bool))


POLICY_LOSSES: dict[str, Callable[..., PolicyTerms]] = {
    "clip": ppo_clip_objective,
    "cispo": cispo_objective,
    "gmpo": gmpo_objective,
}
"""``algo.policy_loss.name`` -> ``(logp, old_logp, advantages, mask, PolicyLossConfig) -> PolicyTerms``."""
