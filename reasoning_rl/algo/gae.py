"""PPO's per-token math with a critic, one pure function per formula.

Shapes: B = completions, L = completion tokens (right-padded); ``mask`` is 1 on the
completion's actions: every sampled token (single-turn: every real token; a multi-turn
episode: the loss mask, 0 on the environment's observation tokens as well as on padding).
Action t is token o_t taken in state s_t = (prompt, o_<t). An observation is not an action:
it is part of the transition from the last action of turn k to the first action of turn k+1
(the environment answers between them), so every formula below runs over the sequence of
action positions alone, as if the observation positions were cut out (their state is inside
s_{t+1}, whose value the critic reads after the observation). The episode ends after its last
action, so the value after it is 0 (nothing more is rewarded).

    r_t      = -beta * (log pi_old(o_t) - log pi_ref(o_t))  +  [t = last] * R      (kl_penalized_rewards)
    last     = the last position where mask is 1                                   (last_action_index)
    delta_t  = r_t + gamma * V(s_{t+1}) - V(s_t),  t+1 the next action position    (gae_advantages)
    A_t      = sum_l (gamma * lam)^l * delta_{t+l}
    R_t      = A_t + V(s_t)
    L_V      = 1/2 max( (V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2 )          (clipped_value_loss)

The clipped surrogate itself is ``reasoning_rl.algo.losses.clipped_surrogate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def kl_penalized_rewards(
    old_logp: torch.Tensor, ref_logp: torch.Tensor | None, scores: torch.Tensor, mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """Per-token rewards of RLHF-style PPO (DeepSeekMath, arXiv 2402.03300, sec. 4.1, eq. 2).  # [B, L]

        r_t = -beta * (log pi_old(o_t | q, o_<t) - log pi_ref(o_t | q, o_<t))   on every token
              + R(q, o)                                                        on the last token

    ``scores`` ``[B]`` is the verifier's reward R of each completion (finite: the caller
    decides what an unscorable one becomes). The paper writes pi_theta in the penalty; the
    tokens were sampled by pi_old and the rewards are fixed before the update, so it is
    pi_old's log-probs (as in InstructGPT, TRL and verl). The log-ratio is KL's k1 estimator.
    ``ref_logp`` may be None only with ``beta == 0``. 0 where ``mask`` is 0 (padding, observations):
    R goes on the episode's last action (:func:`last_action_index`), also when observation tokens
    follow it (an episode cut by its budget inside an observation).
    """
    m = mask.bool()  # [B, L]
    rewards = torch.zeros_like(old_logp)  # [B, L]
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs reference log-probs")
        rewards = torch.where(m, -beta * (old_logp - ref_logp), 0.0)  # [B, L]
    last = last_action_index(mask)  # [B]
    has_tokens = m.any(-1)  # [B]
    bonus = torch.where(has_tokens, scores.to(rewards.dtype), 0.0)  # [B]
    return rewards.scatter_add(1, last.unsqueeze(-1), bonus.unsqueeze(-1))


def last_action_index(mask: torch.Tensor) -> torch.Tensor:
    """The position of each row's last action: the largest t with mask[t] = 1 (0 for a row without one).  # [B]

    With a right-padded single-turn mask this is ``mask.sum() - 1``; in an episode whose mask has holes
    (observations), or ends in observation tokens, it is the last sampled token, not ``mask.sum() - 1``."""
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)  # [B, L]
    return torch.where(mask.bool(), positions, 0).amax(-1)  # [B]


def gae_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2015, arXiv 1506.02438, eq. 16)
    and the lambda-returns the critic regresses on. Returns ``(advantages, returns)``, ``[B, L]`` each.

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)          V after the last real token = 0
        A_t     = delta_t + gamma * lam * A_{t+1}            (= sum_l (gamma lam)^l delta_{t+l})
        R_t     = A_t + V(s_t)

    lam = 1 gives A_t = sum_l gamma^l r_{t+l} - V(s_t) (Monte Carlo; with gamma = 1 the returns
    are the rewards-to-go), lam = 0 the one-step TD error A_t = delta_t.

    Positions where ``mask`` is 0 are skipped, not treated as steps: they pass the next action's
    value and advantage through unchanged, so trailing padding ends the episode and a hole inside
    a row (a multi-turn episode's observation) joins its two sides: at the last action t of a turn,
    s_{t+1} is the state of the next turn's first action (the observation inside it), and

        delta_t = r_t + gamma * V(next action's state) - V(s_t)

    with no discount for the observation's tokens. The result equals GAE on the row with the
    masked positions cut out (tested: mask [1, 1, 0, 0, 1]); rewards and values at masked positions
    are never read. Advantages and returns are 0 there. (verl's ``compute_gae_advantage_return``
    skips observation tokens the same way.)
    """
    m = mask.bool()  # [B, L]
    advantages = torch.zeros_like(rewards)  # [B, L]
    next_value = torch.zeros_like(rewards[:, 0])  # V(s_{t+1}), 0 past the end  # [B]
    next_advantage = torch.zeros_like(rewards[:, 0])  # A_{t+1}  # [B]
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # [B]
        advantage = delta + gamma * lam * next_advantage  # [B]
        real = m[:, t]  # [B]
        advantages[:, t] = torch.where(real, advantage, 0.0)
        next_value = torch.where(real, values[:, t], next_value)
        next_advantage = torch.where(real, advantage, next_advantage)
    returns = torch.where(m, advantages + values, 0.0)  # [B, L]
    return advantages, returns


def whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8,
           sum_over_shards: Callable[[list[float]], list[float]] | None = None) -> torch.Tensor:
    """Advantage normalisation over the masked entries of the whole batch (PPO's usual trick,
    as cleanrl's ``norm_adv`` and verl's ``masked_whiten`` do it).  # [B, L]

        x' = (x - mean(x)) / sqrt(var(x) + eps)       var(x) = 1/n sum (x - mean(x))^2; 0 where mask is 0

    The variance is the population one (divided by n). verl's ``masked_var`` and cleanrl's
    ``.std()`` are unbiased (divided by n - 1), so their whitened values are sqrt((n - 1) / n)
    times ours: 0.99 at n = 50 tokens, equal in the limit. Fewer than two masked entries: returned
    centred only (a variance of one value says nothing).

    When the batch is split into shards (data-parallel ranks, each holding ``values`` of its own),
    ``sum_over_shards`` sums a list of floats over them (``reasoning_rl.distributed.sum_floats``):
    n, sum x, then sum (x - mean)^2 are summed over every shard, so each whitens with the whole
    batch's mean and variance. Every shard must then call this (a collective, twice).
    """
    total = sum_over_shards or (lambda v: v)
    m = mask.bool()  # [B, L]
    count, value_sum = total([float(m.sum()), float(values[m].double().sum())])
    if count == 0:
        return torch.zeros_like(values)
    mean = value_sum / count
    centred = torch.where(m, values - mean, 0.0)  # [B, L]
    if count < 2:
        return centred
    (square_sum,) = total([float((centred[m].double() ** 2).sum())])
    return centred * (square_sum / count + eps) ** -0.5


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped value loss per token (Schulman et al. 2017 baselines' ``cliprange_value``;
    cleanrl ``clip_vloss``, verl ``compute_value_loss``). Returns ``(loss, clipped)``, ``[B, L]`` each.

        V_clip = clip(V, V_old - c, V_old + c)
        loss   = 1/2 * max( (V - R)^2, (V_clip - R)^2 )

    The max is pessimistic: a prediction that moves more than c away from V_old is not
    rewarded for getting closer to R. ``clipped`` marks where the clipped branch is larger
    (the unclipped gradient is cut). Aggregate with ``reasoning_rl.algo.aggregation.aggregate``.

    V is clamped to ``[V_old - c, V_old + c]`` rather than written ``V_old + clip(V - V_old, -c, c)``
    (baselines, cleanrl): inside the range the clamp returns V itself, while ``V_old + (V - V_old)``
    can round one ulp away from V in float32, make the clipped branch the larger one and count
    the token as clipped. Loss and gradient are the same either way.
    """
    unclipped = (values - returns) ** 2  # [B, L]
    v_clip = torch.clamp(values, old_values - clip, old_values + clip)  # [B, L]
    clipped_branch = (v_clip - returns) ** 2  # [B, L]
    return 0.5 * torch.maximum(unclipped, clipped_branch), clipped_branch > unclipped


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """How much of the returns' variance the critic predicts, over the masked entries:

        EV = 1 - Var[R - V] / Var[R]        (1 = perfect, 0 = no better than a constant, < 0 worse)

    NaN when the returns do not vary (nothing to explain), as in cleanrl.
    """
    m = mask.bool()  # [B, L]
    r, v = returns[m], values[m]  # [n]
    if r.numel() < 2:
        return math.nan
    var_r = float(r.var(unbiased=False))
    if var_r == 0.0:
        return math.nan
    return 1.0 - float((r - v).var(unbiased=False)) / var_r
