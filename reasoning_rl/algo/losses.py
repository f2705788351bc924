"""The GRPO objective, one named function per term (DeepSeekMath, arXiv 2402.03300, eq. 3).

    J(theta) = E[ 1/G sum_i 1/|o_i| sum_t { min( ratio_it * A_i, clip(ratio_it, 1-eps_low, 1+eps_high) * A_i )
                                             - beta * KL_k3(pi_theta || pi_ref)_it } ]

    ratio_it = pi_theta(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)

We minimise ``loss = -J``. Shapes: B = sequences in the micro-batch, L = completion
tokens (padded); ``mask`` is 1 on real completion tokens.

The policy term itself is a table too (``reasoning_rl.algo.policy_objectives.POLICY_LOSSES``: GRPO's clip,
optionally dual-clipped, CISPO, GMPO), and so is where the KL goes (:data:`KL_PLACEMENTS`: the loss or the reward).

How per-token terms become one scalar is a choice that differs between papers, so it is a table
too (``reasoning_rl.algo.aggregation``): every aggregation divides by a batch-level denominator
computed once per optimisation batch, so the micro-batches' losses add up to the batch's loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from reasoning_rl.algo.aggregation import (
    LossNormalizer,
    aggregate,
    masked_fill_padding,
    masked_sum,
)
from reasoning_rl.algo.corrections import Correction, CorrectionConfig, apply_correction
from reasoning_rl.algo.entropy_control import ENTROPY_CONTROLS, EntropyControlConfig
from reasoning_rl.algo.loss_tokens import loss_tokens, token_advantages
from reasoning_rl.algo.policy_objectives import POLICY_LOSSES, PolicyLossConfig, policy_ratio


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Unbiased, non-negative estimator of KL(pi_theta || pi_ref) (Schulman, "Approximating
    KL divergence", 2020), as used in DeepSeekMath eq. 4, per token.  # [B, L]

        KL_k3 = pi_ref / pi_theta - log(pi_ref / pi_theta) - 1
    """
    log_ratio = ref_logp - logp  # log(pi_ref / pi_theta)  # [B, L]
    return torch.exp(log_ratio) - log_ratio - 1.0


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """KL_k1 = log pi_theta - log pi_ref: unbiased for KL(pi_theta || pi_ref) but can be negative
    (Schulman 2020; verl's ``kl``).  # [B, L]"""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """KL_k2 = 1/2 (log pi_theta - log pi_ref)^2: biased, low variance, non-negative
    (Schulman 2020; verl's ``mse``).  # [B, L]"""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3_importance_weighted(logp: torch.Tensor, ref_logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """ratio * KL_k3 with ratio = pi_theta / pi_old (TRL's ``use_bias_correction_kl=True``).  # [B, L]

    The samples come from pi_old, so E_{pi_old}[ratio * k3] estimates E_{pi_theta}[k3]. Even at
    ratio 1 its gradient differs from k3's: d(ratio * k3) = k3 * d log pi + (1 - pi_ref/pi) d log pi,
    i.e. k3 / (1 - pi_ref/pi) larger (39% at pi_ref/pi = 0.5; docs/grpo.md)."""
    return policy_ratio(logp, old_logp) * kl_k3(logp, ref_logp)


KL_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "k3": lambda logp, ref, old: kl_k3(logp, ref),
    "k3_is": kl_k3_importance_weighted,
    "k1": lambda logp, ref, old: kl_k1(logp, ref),
    "k2": lambda logp, ref, old: kl_k2(logp, ref),
}
"""``algo.kl.estimator`` -> per-token KL term ``(logp, ref_logp, old_logp) -> [B, L]``."""


# -- KL placement: in the loss (differentiated) or in the reward (detached) ------------------------

def reward_to_go(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum_{s >= t} v_s over each row's real tokens (undiscounted).  # [B, L]"""
    kept = masked_fill_padding(values, mask)
    return torch.flip(torch.cumsum(torch.flip(kept, [-1]), -1), [-1])


def kl_in_reward_advantages(advantages: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor,
                            beta: float) -> torch.Tensor:
    """The KL as a per-token reward penalty (the classic RLHF placement; verl's ``use_kl_in_reward``):
    token t's return is the outcome advantage minus the penalties from t on,

        A_it = A_i - beta * sum_{s >= t} sg(KL_is)

    With KL = k1 = log pi_theta - log pi_ref this is REINFORCE on the reward r - beta * log(pi/pi_ref),
    whose expected gradient on policy is that of -beta * KL(pi_theta || pi_ref) over the whole
    sequence (docs/grpo.md, "Where the KL goes"). ``kl`` is detached here.  # [B, L]"""
    return token_advantages(advantages, kl) - beta * reward_to_go(kl.detach(), mask)


KL_PLACEMENTS = ("loss", "reward")
"""``algo.kl.placement``: the KL term in the loss (differentiated, DeepSeekMath) or in the reward."""


@dataclass
class KLPenaltyConfig:
    """The KL(pi_theta || pi_ref) penalty's weight (``algo.kl``; PPO's whole group, GRPO's :class:`KLConfig`
    adds the estimator and where it goes)."""

    beta: float = 0.04
    """Weight of the KL(pi_theta || pi_ref) penalty; 0 = no reference model is loaded at all."""

    def problems(self) -> list[str]:
        return [f"algo.kl.beta must be >= 0, got {self.beta}"] if self.beta < 0 else []


@dataclass
class KLConfig(KLPenaltyConfig):
    """The KL term of GRPO's loss (``algo.kl``): weight, estimator, placement, clamp, reference resets."""

    estimator: str = "k3"
    """:data:`KL_ESTIMATORS`: k3 (paper), k3_is (ratio * k3, TRL's bias correction), k1, k2 (verl); docs/grpo.md."""
    placement: str = "loss"
    """:data:`KL_PLACEMENTS`: loss (differentiated, DeepSeekMath) or reward (detached per-token penalty in the
    advantage, A_t - beta * sum_{s >= t} KL_s; use with estimator=k1). docs/grpo.md, "Where the KL goes"."""
    clamp: float = 0.0
    """Clamp the per-token KL term to [-x, x] (verl clamps k3 at 10); 0 = off."""
    ref_reset_every: int = 0
    """Iterative GRPO (paper sec. 4.1.3): reset pi_ref to the current policy every N steps (0 = never)."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.estimator not in KL_ESTIMATORS:
            out.append(f"algo.kl.estimator={self.estimator!r} is unknown; choose one of {sorted(KL_ESTIMATORS)}")
        if self.placement not in KL_PLACEMENTS:
            out.append(f"algo.kl.placement={self.placement!r} is unknown; choose one of {', '.join(KL_PLACEMENTS)}")
        elif self.placement == "reward" and self.estimator != "k1":
            out.append(f"algo.kl.placement=reward takes the k1 estimator (a detached log-ratio reward), got "
                       f"algo.kl.estimator={self.estimator}; set algo.kl.estimator=k1")
        if self.ref_reset_every < 0:
            out.append(f"algo.kl.ref_reset_every must be >= 0, got {self.ref_reset_every}")
        return out


@dataclass(frozen=True)
class LossGroups:
    """The settings groups :func:`grpo_loss` reads (``GRPOConfig.loss_groups()`` gives the run's)."""

    policy: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    aggregation: str = "sequence_mean"
    """reasoning_rl.algo.aggregation.LOSS_AGGREGATIONS: how per-token terms become one scalar."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """Acts only when :func:`grpo_loss` is given the sampler's log-probs."""
    entropy_control: EntropyControlConfig = field(default_factory=EntropyControlConfig)


@dataclass
class LossOutput:
    loss: torch.Tensor
    """Scalar to backpropagate: this micro-batch's share of the batch loss (they add up)."""
    policy_loss: float
    """The clipped-surrogate part alone, aggregated the same way (also adds up over micro-batches)."""
    kl: float
    """Token mean of k3 over this micro-batch (0 with beta = 0)."""
    clip_low_fraction: float
    """Share of this micro-batch's tokens where the lower clip (A < 0) is active."""
    clip_high_fraction: float
    """Share of this micro-batch's tokens where the upper clip (A > 0) is active."""
    clip_dual_fraction: float
    """Share of this micro-batch's tokens where dual-clip's bound c * A is active (0 when off)."""
    ratio_mean: float
    """Token mean of pi_theta / pi_old over this micro-batch."""
    num_tokens: float
    """Completion tokens of this micro-batch: the weight of its token means in the batch's."""
    correction: Correction | None = None
    """The off-policy correction's weights and masks (None without behaviour log-probs)."""


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    groups: LossGroups,
    normalizer: LossNormalizer | None = None,
    entropy: torch.Tensor | None = None,
    behaviour_logp: torch.Tensor | None = None,
) -> LossOutput:
    """-J(theta) for one micro-batch (see module docstring).

    ``logp``/``old_logp``/``ref_logp``: per-token log-probs of the sampled tokens,
    ``[B, L]``; ``advantages``: ``[B]``; ``mask``: ``[B, L]`` float.
    ``ref_logp`` may be None only when ``groups.kl.beta == 0`` (no reference model loaded).
    ``normalizer`` holds the whole batch's denominators; None = this micro-batch is the batch.
    ``groups.policy`` picks the objective (:data:`POLICY_LOSSES`: clip, cispo, gmpo) with its options;
    ``ratio_level="sequence"`` uses GSPO's sequence ratio s_i instead of per-token ratios.
    ``groups.kl`` picks the KL term (:data:`KL_ESTIMATORS`; ``k3`` is the paper's); ``clamp > 0``
    bounds the per-token KL to [-x, x] (verl: 10 for k3) and the policy's ``log_ratio_clamp`` also bounds
    log(pi_ref / pi_theta) inside it (verl: 20). ``placement="reward"`` puts the detached KL
    into the per-token advantage (:func:`kl_in_reward_advantages`) instead of the loss.
    ``groups.entropy_control`` picks which tokens keep the policy gradient (Clip-Cov, KL-Cov, the 80/20
    rule: ``reasoning_rl.algo.entropy_control``); ``entropy`` [B, L] is the per-token entropy it reads.
    ``behaviour_logp`` [B, L] is the sampler's log-prob of each token (NaN = unknown: pi_old's is used);
    with it, ``groups.correction`` (:data:`reasoning_rl.algo.corrections.CORRECTIONS`) weighs each token's
    policy term by w_t(pi_old / mu) in the decoupled form (the correction's module docstring):
    loss_t = -w_t * objective_t. Without it no correction applies (the samples are the trainer's own).
    """
    policy, kl_cfg, aggregation = groups.policy, groups.kl, groups.aggregation
    beta, log_ratio_clamp = kl_cfg.beta, policy.log_ratio_clamp
    if kl_cfg.estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kl_cfg.estimator!r}; expected one of {sorted(KL_ESTIMATORS)}")
    if policy.ratio_level not in ("token", "sequence"):
        raise ValueError(f"unknown ratio level {policy.ratio_level!r}; expected token or sequence")
    if policy.name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {policy.name!r}; expected one of {sorted(POLICY_LOSSES)}")
    if kl_cfg.placement not in KL_PLACEMENTS:
        raise ValueError(f"unknown KL placement {kl_cfg.placement!r}; expected one of {list(KL_PLACEMENTS)}")
    # Padded positions hold 0 before any exp(): a raw pad log-prob (say -1000) against a
    # zero-filled reference row would give exp(1000) = inf in the KL, and a NaN gradient
    # even where the aggregation later drops that position.
    logp, old_logp = masked_fill_padding(logp, mask), masked_fill_padding(old_logp, mask)
    ref_logp = None if ref_logp is None else masked_fill_padding(ref_logp, mask)
    n = float(mask.sum().clamp(min=1))
    kl, kl_value = None, 0.0
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs reference log-probs")
        if log_ratio_clamp > 0:  # log(pi_ref / pi_theta) in [-c, c]; no gradient past the bound
            ref_logp = logp + torch.clamp(ref_logp - logp, -log_ratio_clamp, log_ratio_clamp)
        kl = KL_ESTIMATORS[kl_cfg.estimator](logp, ref_logp, old_logp)  # [B, L]
        if kl_cfg.clamp > 0:
            kl = kl.clamp(-kl_cfg.clamp, kl_cfg.clamp)
        kl_value = float(masked_sum(kl.detach(), mask)) / n
        if kl_cfg.placement == "reward":
            advantages = kl_in_reward_advantages(advantages, kl, mask, beta)  # [B, L]
    terms = POLICY_LOSSES[policy.name](logp, old_logp, advantages, mask, policy)
    per_token = -terms.objective  # we minimise  # [B, L]
    corr = None
    control = groups.entropy_control
    controls = control.name != "none"
    # One bundle of the per-token tensors for both per-token rules (reasoning_rl.algo.loss_tokens).
    tokens = (loss_tokens(logp, old_logp, advantages, mask, behaviour_logp, entropy)
              if behaviour_logp is not None or controls else None)
    if tokens is not None and behaviour_logp is not None:
        corr = apply_correction(groups.correction, tokens)
        per_token = per_token * corr.weight  # decoupled: w(pi_old / mu) times the objective on pi_theta / pi_old
    if tokens is not None and controls:
        per_token = ENTROPY_CONTROLS[control.name](per_token, tokens, control)
    if kl is not None and kl_cfg.placement == "loss":
        per_token = per_token + beta * kl
    loss = aggregate(aggregation, per_token, mask, normalizer)
    with torch.no_grad():
        return LossOutput(
            loss=loss,
            policy_loss=float(aggregate(aggregation, -terms.objective.detach() * (1.0 if corr is None else corr.weight),
                                        mask, normalizer)),
            kl=kl_value,
            clip_low_fraction=float(masked_sum(terms.clip_low.float(), mask)) / n,
            clip_high_fraction=float(masked_sum(terms.clip_high.float(), mask)) / n,
            clip_dual_fraction=float(masked_sum(terms.clip_dual.float(), mask)) / n,
            ratio_mean=float(masked_sum(terms.ratio.detach(), mask)) / n,
            num_tokens=n,
            correction=corr,
        )
