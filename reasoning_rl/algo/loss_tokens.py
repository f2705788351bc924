"""The per-token tensors of one micro-batch's policy loss, as the per-token rules read them.

Two kinds of rule act on single tokens of the loss: the off-policy corrections
(:mod:`reasoning_rl.algo.corrections`, a detached weight w_t(pi_old / mu) per token) and the entropy
controls (:mod:`reasoning_rl.algo.entropy_control`, which tokens keep the policy gradient). Both read
the same tensors of the same micro-batch, so the loss (``losses.grpo_loss``; PPO's loss through
``corrections.correct_tokens``) builds them once with :func:`loss_tokens` and hands the one
:class:`LossTokens` to each.

Shapes: B sequences, L completion tokens (padded); ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossTokens:
    """Per-token tensors of one micro-batch.  # [B, L] each (advantages [B, 1] or [B, L])"""

    logp: torch.Tensor
    """log pi_theta, the policy being updated (the rules read it detached)."""
    old_logp: torch.Tensor
    """log pi_old: the trainer's log-prob of the batch before its updates (the proximal policy; pi_train
    in the corrections' rho = pi_train / mu)."""
    advantages: torch.Tensor
    """``[B, 1]`` (one per sequence, broadcast over its tokens) or ``[B, L]`` (per token)."""
    mask: torch.Tensor
    behaviour_logp: torch.Tensor | None = None
    """log mu: the sampler's log-prob of the token it drew (Completion.logprobs), pi_old's where unknown
    and on padding; None when the sampler reported none (then no correction applies)."""
    entropy: torch.Tensor | None = None
    """The policy's entropy at each position (the 80/20 rule reads it); None when not computed."""


def token_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[B]`` advantages as ``[B, 1]`` (they broadcast over ``like``'s tokens); ``[B, L]`` ones unchanged."""
    return advantages.unsqueeze(-1) if advantages.dim() == like.dim() - 1 else advantages


def known_behaviour(behaviour_logp: torch.Tensor, train_logp: torch.Tensor) -> torch.Tensor:
    """``behaviour_logp`` with NaN (a completion whose sampler reported no log-probs) replaced by the
    trainer's own: rho = 1 there, so no correction touches it.  # [B, L]"""
    return torch.where(torch.isnan(behaviour_logp), train_logp.detach(), behaviour_logp)


def loss_tokens(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                behaviour_logp: torch.Tensor | None = None, entropy: torch.Tensor | None = None) -> LossTokens:
    """The bundle of one micro-batch: ``[B]`` advantages as ``[B, 1]``; the sampler's log-probs, when
    given, with the unknown ones (NaN: :func:`known_behaviour`) and padding replaced by pi_old's."""
    if behaviour_logp is not None:
        behaviour_logp = torch.where(mask.bool(), known_behaviour(behaviour_logp, old_logp), old_logp.detach())
    return LossTokens(logp, old_logp, token_advantages(advantages, logp), mask, behaviour_logp, entropy)
