"""The GRPO objective, one named function per term (DeepSeekMath, arXiv 2402.03300, eq. 3).

    J(theta) = E[ 1/G sum_i 1/|o_i| sum_t { min( ratio_it * A_i, clip(ratio_it, 1-eps_low, 1+eps_high) * A_i )
                                             - beta * KL_k3(pi_theta || pi_ref)_it } ]

    ratio_it = pi_theta(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)

We minimise ``loss = -J``. Shapes: B = sequences in the micro-batch, L = completion
tokens (padded); ``mask`` is 1 on real completion tokens.

The policy term itself is a table too (:data:`POLICY_LOSSES`: GRPO's clip, optionally dual-clipped,
CISPO, GMPO), and so is where the KL goes (:data:`KL_PLACEMENTS`: the loss or the reward).

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


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Unbiased, non-negative estimator of KL(pi_theta || pi_ref) (Schulman, "Approximating
    KL divergence", 2020), as used in DeepSeekMath eq. 4, per token.  # [B, L]

        KL_k3 = pi_ref / pi_theta - log(pi_ref / pi_theta) - 1
    """
    log_ratio = ref_logp - logp  # log(pi_ref / pi_theta)  # [B, L]
    return torch.exp(log_ratio) - log_ratio - 1.0


def clipped_tokens(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                   eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the clip is the active branch of the surrogate's min(): (ratio < 1 - eps_low and A < 0,
    ratio > 1 + eps_high and A > 0). ``advantages`` broadcasts to ``ratio``.  # [B, L] bool each"""
    return (ratio < 1.0 - eps_low) & (advantages < 0), (ratio > 1.0 + eps_high) & (advantages > 0)


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
