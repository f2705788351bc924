"""How per-token loss terms become one scalar: the aggregations and the batch-level denominators.

Loss normalisation lives here and only here: every aggregation divides by a denominator of the whole
optimisation batch (:class:`LossNormalizer`, computed once from all its completions), so the losses of the
micro-batches of one batch add up to the loss of the whole batch, and so do their gradients.
Shapes: B = sequences in the micro-batch, L = completion tokens (padded); ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from reasoning_rl import distributed

# -- normalisation: the batch-level denominators, computed once ------------------------------------

@dataclass(frozen=True)
class LossNormalizer:
    """The denominators of every aggregation for ONE optimisation batch.

    ``num_sequences`` (N) and ``num_tokens`` (sum_i |o_i|) count the whole batch, not a
    micro-batch; ``max_tokens`` is Dr. GRPO's constant (the longest completion allowed).
    In a data-parallel run the batch is the GLOBAL one (every rank's shard): each rank's
    loss is then its share of the global loss, and summing the ranks' gradients
    (``reasoning_rl.algo.optim.clip_and_measure``) gives the single-process gradient.
    """

    num_sequences: float
    num_tokens: float
    max_tokens: float = 1.0

    @classmethod
    def for_batch(cls, completion_lengths: Sequence[int], max_tokens: float = 1.0) -> LossNormalizer:
        """From the token counts of every completion in the batch; with several ranks the counts
        are summed over ranks (one all-reduce; every rank must call this for each batch)."""
        n, tokens = distributed.sum_floats([float(len(completion_lengths)), float(sum(completion_lengths))])
        return cls(num_sequences=n, num_tokens=float(max(1.0, tokens)), max_tokens=float(max_tokens))

    @classmethod
    def for_mask(cls, mask: torch.Tensor, max_tokens: float = 1.0) -> LossNormalizer:
        """When ``mask`` [B, L] is the whole batch."""
        return cls(num_sequences=float(mask.shape[0]), num_tokens=float(mask.sum().clamp(min=1)),
                   max_tokens=float(max_tokens))


def masked_fill_padding(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` with exactly 0 where ``mask`` is 0 (gradient 0 there too).  # [B, L]"""
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum of ``values`` where ``mask`` is set. ``torch.where``, not ``values * mask``:
    a non-finite value at a padded position (e.g. exp of a very negative pad log-prob)
    times 0 is NaN, while selecting 0 there is exact."""
    kept = masked_fill_padding(values, mask)
    return kept.sum() if dim is None else kept.sum(dim)


# -- aggregation: per-token values [B, L] + mask -> scalar (a share of the batch's loss) -----------

def sequence_mean(values: torch.Tensor, mask: torch.Tensor, num_sequences: float | None = None,
                  **_: object) -> torch.Tensor:
    """The paper's: mean over each sequence's tokens, then mean over the batch's N sequences.
        1/N sum_i 1/|o_i| sum_t v_it          (N = this micro-batch's rows when not given)"""
    per_seq = masked_sum(values, mask, dim=-1) / mask.sum(-1).clamp(min=1)  # [B]
    return per_seq.sum() / (num_sequences if num_sequences is not None else values.shape[0])


def token_mean(values: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None, **_: object) -> torch.Tensor:
    """DAPO's token-level mean over all tokens of the batch (arXiv 2503.14476, eq. 12):
        1/sum_i |o_i| sum_i sum_t v_it        (the micro-batch's token count when not given)"""
    denom = float(num_tokens) if num_tokens is not None else mask.sum().clamp(min=1)
    return masked_sum(values, mask) / denom


def constant_normalizer(values: torch.Tensor, mask: torch.Tensor, max_tokens: float = 1.0,
                        num_sequences: float | None = None, **_: object) -> torch.Tensor:
    """Dr. GRPO's (arXiv 2503.20783): sum over tokens divided by a constant (the maximum
    completion length), then mean over the batch's N sequences:  1/N sum_i 1/L_max sum_t v_it"""
    per_seq = masked_sum(values, mask, dim=-1) / max_tokens  # [B]
    return per_seq.sum() / (num_sequences if num_sequences is not None else values.shape[0])


LOSS_AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "sequence_mean": sequence_mean,
    "token_mean": token_mean,
    "constant": constant_normalizer,
}


def aggregate(name: str, values: torch.Tensor, mask: torch.Tensor, normalizer: LossNormalizer | None = None) -> torch.Tensor:
    """Apply the aggregation called ``name`` with the batch's denominators (the micro-batch's
    own when ``normalizer`` is None, i.e. when it is the whole batch)."""
    if name not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {name!r}; expected one of {sorted(LOSS_AGGREGATIONS)}")
    norm = normalizer or LossNormalizer.for_mask(mask)
    return LOSS_AGGREGATIONS[name](values, mask, num_sequences=norm.num_sequences, num_tokens=norm.num_tokens,
                                   max_tokens=norm.max_tokens)
