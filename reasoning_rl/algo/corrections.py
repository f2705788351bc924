"""Off-policy corrections: per-token weights for samples the trainer did not draw itself.

The sampler (behaviour policy mu: another engine, another precision, stale weights) and the
trainer's policy disagree on the probability of the tokens that were sampled. With

    rho_t = pi_train(y_t | x, y_<t) / mu(y_t | x, y_<t)       (per token, from log-probs)

each correction is one function of a table (:data:`CORRECTIONS`, ``algo.correction.name``) that returns
a DETACHED weight ``w_t`` per token; the policy loss of every objective (clip, cispo, gmpo; GRPO's
family and PPO) is multiplied by it before aggregation (``reasoning_rl.algo.losses.grpo_loss``):

    loss_t = - w_t * objective_t

Which pi_train: the **decoupled PPO form** (Hilton et al. 2021, "Batch size-invariance for policy
optimization", arXiv 2110.00641). pi_train in rho is the proximal policy pi_old (the trainer's log-probs
of the batch before its first update, held fixed over the mu = ``algo.num_iterations`` updates); the
objective's own ratio pi_theta / pi_old does the clipping:

    J = E_mu[ w(pi_old / mu) * min( r * A, clip(r, 1 - eps_low, 1 + eps_high) * A ) ],   r = pi_theta / pi_old

With mu = 1, pi_old is pi_theta detached (ratio exactly 1), so the weight is pi_theta / mu of the batch
as sampled. With mu > 1 the weight stays that of pi_old at every update, while r moves: the behaviour
policy corrects, pi_old clips. Only ``dppo_tv`` reads pi_theta itself (its region moves with the update).

Shapes: B sequences, L completion tokens (padded); ``mask`` is 1 on real tokens. Padding gets weight 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from reasoning_rl.algo.loss_tokens import LossTokens, loss_tokens
from reasoning_rl.algo.loss_tokens import (
    known_behaviour as known_behaviour,  # where docs/offpolicy.md names it
)
from reasoning_rl.config_checks import AT_LEAST_0, FRACTION, POSITIVE

ICEPOP_BOUNDS = (0.5, 5.0)
"""IcePop's two-sided mask [alpha, beta] (Ring-1T, arXiv 2510.18855, sec. 3)."""


@dataclass
class CorrectionConfig:
    """The off-policy correction and its options (``algo.correction``; verl's ``algorithm.rollout_correction``).
    A correction is one function of :data:`CORRECTIONS` that reads its options from this dataclass: adding
    one is its function, its table line and, when it has an option, one field here (its allowed range in
    the field's metadata, which validation reads: reasoning_rl.config_checks.declared_ranges)."""

    name: str = "none"
    """Off-policy correction of the policy loss (docs/offpolicy.md): none, tis, mis_token, mis_seq, mis_geo,
    icepop, dppo_tv or trust_region_mask. Acts only when the completions carry the sampler's log-probs
    (Completion.logprobs)."""
    c: float = field(default=2.0, metadata={"range": POSITIVE})
    """tis: the truncation C of the weight min(rho, C) (about 2 in verl/TRL)."""
    low: float = field(default=0.5, metadata={"range": AT_LEAST_0})
    """mis_token / mis_seq / mis_geo: lower bound a of the kept rho (token, sequence product, geometric mean)."""
    high: float = field(default=2.0, metadata={"range": POSITIVE})
    """mis_token / mis_seq / mis_geo: upper bound b of the kept rho."""
    delta: float = field(default=0.2, metadata={"range": FRACTION})
    """dppo_tv: the bound on |pi_theta(y_t) - mu(y_t)| beyond which a token's update is blocked."""
    kl_max: float = field(default=0.05, metadata={"range": AT_LEAST_0})
    """trust_region_mask: a sequence whose largest per-token KL(mu || pi_train) estimate exceeds this is masked."""

    def problems(self) -> list[str]:
        out = []
        if self.name not in CORRECTIONS:
            out.append(f"algo.correction.name={self.name!r} is unknown; choose one of {', '.join(CORRECTIONS)}")
        if self.low > self.high:
            out.append(f"algo.correction.low={self.low} is above algo.correction.high={self.high}: "
                       f"every token would be masked; swap them")
        return out


@dataclass(frozen=True)
class Correction:
    """A correction's result.  # [B, L] each"""

    weight: torch.Tensor
    """Detached weight of each token's policy loss (0 on padding and on masked tokens)."""
    masked: torch.Tensor
    """bool: the correction set this token's weight to 0."""
    truncated: torch.Tensor
    """bool: the correction capped this token's weight (tis's rho > C)."""


def log_rho(x: LossTokens) -> torch.Tensor:
    """log rho_t = log pi_old(y_t) - log mu(y_t), 0 on padding.  # [B, L]"""
    lr = (x.old_logp - x.behaviour_logp).detach()
    return torch.where(x.mask.bool(), lr, torch.zeros((), dtype=lr.dtype))


def _result(x: LossTokens, weight: torch.Tensor, masked: torch.Tensor | None = None,
            truncated: torch.Tensor | None = None) -> Correction:
    real = x.mask.bool()
    none = torch.zeros_like(real)
    masked = none if masked is None else masked.expand_as(real) & real
    truncated = none if truncated is None else truncated.expand_as(real) & real
    weight = torch.where(real & ~masked, weight.expand_as(real).to(x.logp.dtype), torch.zeros((), dtype=x.logp.dtype))
    return Correction(weight.detach(), masked, truncated)


def _inside(value: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return (value >= low) & (value <= high)


def no_correction(x: LossTokens, o: CorrectionConfig) -> Correction:
    """w_t = 1: the samples are treated as the trainer's own (today's behaviour)."""
    return _result(x, torch.ones_like(x.logp))


def truncated_is(x: LossTokens, o: CorrectionConfig) -> Correction:
    """TIS, truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training", fengyao.notion.site; Ionides 2008):

        w_t = min(rho_t, C)

    Unbiased where rho_t <= C; the cap bounds the variance a token with mu(y_t) << pi_train(y_t) brings."""
    rho = torch.exp(log_rho(x))  # [B, L]
    return _result(x, torch.clamp(rho, max=o.c), truncated=rho > o.c)


def _masked_is(x: LossTokens, bounds: tuple[float, float]) -> Correction:
    rho = torch.exp(log_rho(x))  # [B, L]
    return _result(x, rho, masked=~_inside(rho, *bounds))


def masked_is_token(x: LossTokens, o: CorrectionConfig) -> Correction:
    """Token-level masked importance sampling (Liu et al. 2025, "When Speed Kills Stability: Demystifying
    RL Collapse from the Training-Inference Mismatch"; verl's rollout correction):

        w_t = rho_t * 1[a <= rho_t <= b]

    A token outside [a, b] contributes nothing (a mask, not a cap: its gradient would be mostly noise)."""
    return _masked_is(x, (o.low, o.high))


def masked_is_sequence(x: LossTokens, o: CorrectionConfig) -> Correction:
    """Sequence-level masked importance sampling (Liu et al. 2025, as :func:`masked_is_token`), with the
    sequence's ratio rho_i = prod_t rho_it (the exact importance weight of the whole completion):

        w_it = rho_i * 1[a <= rho_i <= b]        (the same weight on every token of sequence i)"""
    seq_log = log_rho(x).sum(-1, keepdim=True)  # log prod_t rho_t  # [B, 1]
    seq_rho = torch.exp(seq_log)  # [B, 1]
    return _result(x, seq_rho, masked=~_inside(seq_rho, o.low, o.high))


def masked_is_geometric(x: LossTokens, o: CorrectionConfig) -> Correction:
    """Masked importance sampling with the mask decided by the geometric mean of the sequence's ratios
    (verl's geometric rejection; length-normalised, so long completions are not masked for their length):

        rho_geo_i = exp( 1/|o_i| sum_t log rho_it ),     w_it = rho_it * 1[a <= rho_geo_i <= b]"""
    lr = log_rho(x)  # [B, L]
    geo = torch.exp(lr.sum(-1, keepdim=True) / x.mask.sum(-1, keepdim=True).clamp(min=1))  # [B, 1]
    return _result(x, torch.exp(lr), masked=~_inside(geo, o.low, o.high))


def icepop(x: LossTokens, o: CorrectionConfig) -> Correction:
    """IcePop (Ring-1T, arXiv 2510.18855): the two-sided mask M(k) = k if alpha <= k <= beta else 0 on
    the training/inference ratio k = rho_t, at the paper's alpha = 0.5, beta = 5 (:data:`ICEPOP_BOUNDS`):

        w_t = rho_t * 1[0.5 <= rho_t <= 5]

    It is :func:`masked_is_token` at fixed bounds; ``algo.correction.low/high`` do not move it."""
    return _masked_is(x, ICEPOP_BOUNDS)


def dppo_tv(x: LossTokens, o: CorrectionConfig) -> Correction:
    """DPPO's total-variation trust region (arXiv 2602.04879): a token is blocked when the policy has left
    the region |pi_theta(y_t) - mu(y_t)| <= delta AND its update would push it further out; a token that
    left the region but whose gradient brings it back keeps it (as PPO's clip, in probability space):

        leaves_t = (A_t > 0 and pi_theta(y_t) - mu(y_t) > delta) or (A_t < 0 and mu(y_t) - pi_theta(y_t) > delta)
        w_t = 1 - leaves_t

    It reads pi_theta as it is at this update (not pi_old): with mu > 1 updates the region moves with it."""
    p = torch.exp(x.logp.detach())  # [B, L]
    q = torch.exp(x.behaviour_logp.detach())  # [B, L]
    adv = x.advantages.expand_as(p)  # [B, L]
    leaves = ((adv > 0) & (p - q > o.delta)) | ((adv < 0) & (q - p > o.delta))
    return _result(x, torch.ones_like(p), masked=leaves)


def trust_region_mask(x: LossTokens, o: CorrectionConfig) -> Correction:
    """Trust Region Masking (Li et al., arXiv 2512.23075): drop a whole sequence when its largest token-level
    divergence between the sampler and the trainer exceeds delta. The per-token KL(mu || pi_train) is
    estimated on the sampled token by k3 (Schulman 2020; samples come from mu):

        k3_t = rho_t - 1 - log rho_t,         w_it = 1[ max_t k3_it <= delta ]"""
    lr = log_rho(x)  # [B, L]
    k3 = torch.exp(lr) - 1.0 - lr  # [B, L], 0 on padding (lr = 0 there)
    worst = k3.max(-1, keepdim=True).values  # [B, 1]
    return _result(x, torch.ones_like(lr), masked=worst > o.kl_max)


CORRECTIONS: dict[str, Callable[[LossTokens, CorrectionConfig], Correction]] = {
    "none": no_correction,
    "tis": truncated_is,
    "mis_token": masked_is_token,
    "mis_seq": masked_is_sequence,
    "mis_geo": masked_is_geometric,
    "icepop": icepop,
    "dppo_tv": dppo_tv,
    "trust_region_mask": trust_region_mask,
}
"""``algo.correction.name`` -> ``(LossTokens, CorrectionConfig) -> Correction``."""


def apply_correction(config: CorrectionConfig, x: LossTokens) -> Correction:
    """The correction ``config.name`` (:data:`CORRECTIONS`) with its options."""
    if config.name not in CORRECTIONS:
        raise ValueError(f"unknown off-policy correction {config.name!r}; expected one of {', '.join(CORRECTIONS)}")
    if x.behaviour_logp is None:
        raise ValueError(f"correction {config.name!r} needs the sampler's log-probs: build the tokens with "
                         "behaviour_logp")
    return CORRECTIONS[config.name](x, config)


def correct_tokens(config: CorrectionConfig, logp: torch.Tensor, train_logp: torch.Tensor,
                   behaviour_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> Correction:
    """The correction ``config`` of one micro-batch, any loss: multiply each token's policy term by
    ``.weight``. ``behaviour_logp`` may hold NaN (unknown: :func:`known_behaviour`); padding is ignored.
    ``advantages`` is ``[B]``, ``[B, 1]`` or ``[B, L]``.  # [B, L] each"""
    return apply_correction(config, loss_tokens(logp, train_logp, advantages, mask, behaviour_logp))
