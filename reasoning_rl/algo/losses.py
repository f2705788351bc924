"""The GRPO objective, one named function per term (DeepSeekMath, arXiv 2402.03300, eq. 3).

    J(theta) = E[ 1/G sum_i 1/|o_i| sum_t { min( ratio_it * A_i, clip(ratio_it, 1-eps_low, 1+eps_high) * A_i )
                                             - beta * KL_k3(pi_theta || pi_ref)_it } ]

    ratio_it = pi_theta(o_it | q, o_i<t) / pi_old(o_it | q, o_i<t)

We minimise ``loss = -J``. Shapes: B = sequences in the micro-batch, L = completion
tokens (padded); ``mask`` is 1 on real completion tokens.

How per-token terms become one scalar is a choice that differs between papers, so
it is a table (:data:`LOSS_AGGREGATIONS`) too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


def policy_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """ratio = pi_theta / pi_old = exp(log pi_theta - log pi_old).  # [B, L]"""
    return torch.exp(logp - old_logp)


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """PPO's pessimistic surrogate (Schulman et al. 2017), per token.  # [B, L]

        surrogate = min( ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A )

    ``advantages`` is ``[B]`` (one per sequence) and broadcast over tokens.
    ``eps_high > eps_low`` is DAPO's clip-higher (arXiv 2503.14476).
    """
    adv = advantages.unsqueeze(-1)  # [B, 1]
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


# -- aggregation: per-token values [B, L] + mask -> scalar ---------------------------------------

def sequence_mean(values: torch.Tensor, mask: torch.Tensor, **_: object) -> torch.Tensor:
    """The paper's: mean over each sequence's tokens, then mean over sequences.
        1/G sum_i 1/|o_i| sum_t v_it"""
    per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_seq.mean()


def token_mean(values: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None, **_: object) -> torch.Tensor:
    """DAPO's token-level mean over all tokens of the batch (arXiv 2503.14476, eq. 12):
        1/sum_i |o_i| sum_i sum_t v_it
    ``num_tokens`` is the token count of the WHOLE batch when the batch is split into
    micro-batches (so gradient accumulation gives the same result as one big batch)."""
    denom = float(num_tokens) if num_tokens is not None else mask.sum().clamp(min=1)
    return (values * mask).sum() / denom


def constant_normalizer(values: torch.Tensor, mask: torch.Tensor, max_tokens: float = 1.0, **_: object) -> torch.Tensor:
    """Dr. GRPO's (arXiv 2503.20783): sum over tokens divided by a constant (the maximum
    completion length), then mean over sequences:  1/G sum_i 1/L_max sum_t v_it"""
    return ((values * mask).sum(-1) / max_tokens).mean()


LOSS_AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "sequence_mean": sequence_mean,
    "token_mean": token_mean,
    "constant": constant_normalizer,
}


@dataclass
class LossOutput:
    loss: torch.Tensor
    """Scalar to backpropagate (already scaled by the micro-batch's share of the batch)."""
    policy_loss: float
    kl: float
    clip_low_fraction: float
    clip_high_fraction: float
    ratio_mean: float


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float,
    eps_low: float,
    eps_high: float,
    aggregation: str = "sequence_mean",
    num_tokens: float | None = None,
    max_tokens: float = 1.0,
) -> LossOutput:
    """-J(theta) for one micro-batch (see module docstring).

    ``logp``/``old_logp``/``ref_logp``: per-token log-probs of the sampled tokens,
    ``[B, L]``; ``advantages``: ``[B]``; ``mask``: ``[B, L]`` float.
    ``ref_logp`` may be None only when ``beta == 0`` (no reference model loaded).
    """
    if aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {aggregation!r}; expected one of {sorted(LOSS_AGGREGATIONS)}")
    aggregate = LOSS_AGGREGATIONS[aggregation]
    ratio = policy_ratio(logp, old_logp)  # [B, L]
    surrogate = clipped_surrogate(ratio, advantages, eps_low, eps_high)  # [B, L]
    per_token = -surrogate  # we minimise  # [B, L]
    kl_value = 0.0
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs reference log-probs")
        kl = kl_k3(logp, ref_logp)  # [B, L]
        per_token = per_token + beta * kl
        kl_value = float(sequence_mean(kl.detach(), mask))
    loss = aggregate(per_token, mask, num_tokens=num_tokens, max_tokens=max_tokens)
    with torch.no_grad():
        # A token is clipped when the clip is the active branch of the min().
        adv = advantages.unsqueeze(-1)
        clip_low = ((ratio < 1.0 - eps_low) & (adv < 0)).float()
        clip_high = ((ratio > 1.0 + eps_high) & (adv > 0)).float()
        n = mask.sum().clamp(min=1)
        out = LossOutput(
            loss=loss,
            policy_loss=float(sequence_mean(-surrogate.detach(), mask)),
            kl=kl_value,
            clip_low_fraction=float((clip_low * mask).sum() / n),
            clip_high_fraction=float((clip_high * mask).sum() / n),
            ratio_mean=float((ratio.detach() * mask).sum() / n),
        )
    return out


def microbatch_weight(aggregation: str, micro_sequences: int, total_sequences: int) -> float:
    """Weight of one micro-batch's loss so that summing micro-batch gradients equals the
    gradient of the whole batch: means over sequences need ``m / N``; the token mean
    already divides by the whole batch's token count (``num_tokens``)."""
    return 1.0 if aggregation == "token_mean" else micro_sequences / total_sequences
