"""The likelihood methods of DeepSeekMath's unified paradigm (arXiv 2402.03300, sec. 5.2.1, eq. 5).

Every method the paper compares has the gradient

    grad J_A(theta) = E_{(q, o) ~ D} [ 1/|o| sum_t GC_A(q, o, t, pi_rf) * grad log pi_theta(o_t | q, o_<t) ]

and differs only in its data source D, its reward function pi_rf and its gradient
coefficient GC_A. This module holds the coefficients and losses of the methods
without a ratio: SFT (GC = 1 on reference solutions), RFT and Online RFT
(GC = I(o), 1 when the verifier accepts o, 0 otherwise) and DPO (a sigmoid of the
pair's implicit reward margin). GRPO's and PPO's coefficients (advantages through a
clipped ratio) are in ``advantages.py``, ``gae.py`` and ``losses.py``.

Shapes: B = sequences, L = completion tokens (padded); ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasoning_rl.algo.aggregation import LossNormalizer, masked_sum, sequence_mean, token_mean


def sft_coefficients(num_sequences: int) -> torch.Tensor:
    """SFT: GC = 1 for every token of every reference solution.  # [B]"""
    return torch.ones(num_sequences)


def rejection_coefficients(correct: Sequence[bool]) -> torch.Tensor:
    """RFT and Online RFT: GC = I(o), 1 when the verifier accepts the completion, 0 otherwise.  # [B]

    A completion the verifier could not score is not accepted (GC = 0)."""
    return torch.tensor([1.0 if c else 0.0 for c in correct])


NLL_AGGREGATIONS = ("sequence_mean", "token_mean")
"""How :func:`weighted_nll` averages: per sequence then over N (eq. 5), or over all T tokens."""


def weighted_nll(logp: torch.Tensor, coefficients: torch.Tensor, mask: torch.Tensor,
                 normalizer: LossNormalizer | None = None, aggregation: str = "sequence_mean") -> torch.Tensor:
    """The loss whose gradient is eq. 5 with one coefficient per sequence (SFT, RFT, Online RFT):

        sequence_mean:  loss = -1/N sum_i GC_i * 1/|o_i| sum_t log pi_theta(o_it | q_i, o_i<t)
        token_mean:     loss = -1/T sum_i GC_i * sum_t log pi_theta(o_it | q_i, o_i<t),  T = sum_i |o_i|

    ``coefficients`` is ``[B]``. N and T are ``normalizer``'s, the whole optimisation batch's
    sequences and tokens (every sampled completion for RFT, accepted or not, as in eq. 5's
    expectation over D), so the losses of its micro-batches add up. ``token_mean`` weighs a
    long target like many short ones (the warm start's cross-entropy, ``reasoning_rl.warmstart``)."""
    if aggregation not in NLL_AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {', '.join(NLL_AGGREGATIONS)}")
    weighted = -logp * coefficients.unsqueeze(-1)  # [B, L]
    if aggregation == "token_mean":
        return token_mean(weighted, mask, num_tokens=None if normalizer is None else normalizer.num_tokens)
    return sequence_mean(weighted, mask, num_sequences=None if normalizer is None else normalizer.num_sequences)


def sequence_logprob(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(o | q) = sum_t log pi(o_t | q, o_<t) over the completion's tokens.  # [B]"""
    return masked_sum(logp, mask, dim=-1)


def dpo_margin(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
               ref_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's implicit reward margin of each pair (Rafailov et al. 2023, arXiv 2305.18290):  # [P]

        z = beta * ( log pi_theta(o+)/pi_ref(o+) - log pi_theta(o-)/pi_ref(o-) )

    from sequence log-probs (:func:`sequence_logprob`) of the chosen o+ and rejected o-."""
    return beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))


def dpo_loss(margin: torch.Tensor, num_pairs: float | None = None) -> torch.Tensor:
    """DPO's loss, -log sigmoid(z), summed over the pairs and divided by the batch's pair count
    (``num_pairs``; this micro-batch's when not given), so micro-batch losses add up:

        loss = -1/P sum_p log sigmoid(z_p)

    ``logsigmoid`` is the stable form (no exp overflow for large |z|)."""
    return -torch.nn.functional.logsigmoid(margin).sum() / (num_pairs if num_pairs is not None else margin.numel())


def dpo_coefficients(margin: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's gradient coefficient in the paper's frame (sec. 5.2.1): for each pair,

        GC = beta * sigmoid(-z)      (+ on the chosen completion's tokens, - on the rejected one's)

    since d/dz [-log sigmoid(z)] = -sigmoid(-z). It is large while the pair is ordered wrongly
    (z < 0) and vanishes once the policy prefers o+ by a margin; a diagnostic, the loss is
    :func:`dpo_loss`.  # [P]"""
    return beta * torch.sigmoid(-margin)
