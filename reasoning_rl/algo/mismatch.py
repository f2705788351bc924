"""How far the sampler's policy mu is from the trainer's: metrics logged whenever the completions
carry the sampler's log-probs (``Completion.logprobs``), with or without a correction.

With rho_t = pi_train(y_t) / mu(y_t) on each sampled token (pi_train = pi_old, the trainer's log-prob
before the step's updates; reasoning_rl.algo.corrections), over the step's tokens and sequences:

    mismatch/log_rho_abs_mean   1/T sum_t |log rho_t|
    mismatch/log_rho_abs_max    max_t |log rho_t|
    mismatch/kl_k3              1/T sum_t (rho_t - 1 - log rho_t)   k3 estimate of KL(mu || pi_train) per token
                                (Schulman 2020: unbiased and >= 0 with samples from mu)
    mismatch/ess_fraction       ESS / N = (sum_i w_i)^2 / (N sum_i w_i^2),  w_i = prod_t rho_it
                                (Kong 1992; 1 when every sequence weighs the same, 1/N when one dominates)
    mismatch/masked_token_fraction, mismatch/truncated_token_fraction, mismatch/masked_sequence_fraction
                                what the correction zeroed or capped (a sequence counts when all its tokens are)
    mismatch/rho_mean_pLO-HI    mean rho_t over tokens whose sampler probability mu(y_t) is in [LO%, HI%)
    mismatch/staleness_mean, mismatch/staleness_max
                                policy versions between the trainer and the completion's sampler

Tokens are counted once per step (the first of the mu updates). Data-parallel: each rank's values,
averaged over ranks by the run loop (ESS and max are then approximate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from reasoning_rl.algo.corrections import Correction

PROBABILITY_BUCKETS = ((0.0, 0.01), (0.01, 0.1), (0.1, 0.5), (0.5, 0.9), (0.9, 1.0))
"""Buckets of the sampler's probability mu(y_t) of the sampled token for ``mismatch/rho_mean_p*``."""


def bucket_key(low: float, high: float) -> str:
    """``mismatch/rho_mean_p10-50`` for [0.1, 0.5) (percent, two digits; the last bucket holds 1.0)."""
    return f"mismatch/rho_mean_p{round(low * 100):02d}-{round(high * 100):02d}"


BUCKET_KEYS = tuple(bucket_key(lo, hi) for lo, hi in PROBABILITY_BUCKETS)


def behaviour_rows(completions: Sequence[Any], trained: Sequence[Sequence[int]]) -> list[torch.Tensor] | None:
    """The sampler's log-prob of each trained token, one ``[len]`` row per completion; None when no
    completion carries log-probs. A row whose log-probs are missing or do not match the trained tokens
    (an empty completion is trained as its EOS) is NaN: the loss then reads the trainer's own log-prob
    there (rho = 1, no correction) and the metrics leave it out."""
    if not any(getattr(c, "logprobs", None) for c in completions):
        return None
    rows = []
    for c, tokens in zip(completions, trained):
        lp = getattr(c, "logprobs", None)
        ok = lp is not None and len(lp) == len(tokens)
        rows.append(torch.tensor(lp, dtype=torch.float32) if ok else torch.full((len(tokens),), math.nan))
    return rows


class MismatchStats:
    """Sums over a step's micro-batches; :meth:`metrics` divides once."""

    def __init__(self) -> None:
        self.tokens = 0.0
        self.abs_sum = 0.0
        self.abs_max = 0.0
        self.k3_sum = 0.0
        self.masked = 0.0
        self.truncated = 0.0
        self.sequences = 0
        self.masked_sequences = 0
        self.seq_log_weights: list[float] = []
        self.bucket_sums = [0.0] * len(PROBABILITY_BUCKETS)
        self.bucket_counts = [0.0] * len(PROBABILITY_BUCKETS)

    def add(self, train_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
            correction: Correction | None = None) -> None:
        """One micro-batch: log-probs ``[B, L]`` (NaN behaviour = unknown, left out), ``mask`` 1 on real tokens."""
        known = mask.bool() & ~torch.isnan(behaviour_logp)  # [B, L]
        lr = torch.where(known, train_logp.detach().double() - behaviour_logp.double(), 0.0)  # log rho  # [B, L]
        rho = torch.exp(lr)
        self.tokens += float(known.sum())
        self.abs_sum += float(lr.abs().sum())
        if known.any():
            self.abs_max = max(self.abs_max, float(lr.abs().max()))
        self.k3_sum += float(torch.where(known, rho - 1.0 - lr, 0.0).sum())
        rows = known.any(-1)  # sequences with at least one known token  # [B]
        self.sequences += int(rows.sum())
        self.seq_log_weights += lr.sum(-1)[rows].tolist()
        if correction is not None:
            self.masked += float((correction.masked & known).sum())
            self.truncated += float((correction.truncated & known).sum())
            all_masked = (correction.masked | ~known).all(-1) & rows  # [B]
            self.masked_sequences += int(all_masked.sum())
        mu = torch.exp(behaviour_logp.double())
        for i, (lo, hi) in enumerate(PROBABILITY_BUCKETS):
            upper = mu <= hi if i == len(PROBABILITY_BUCKETS) - 1 else mu < hi
            sel = known & (mu >= lo) & upper
            self.bucket_sums[i] += float(torch.where(sel, rho, 0.0).sum())
            self.bucket_counts[i] += float(sel.sum())

    def metrics(self) -> dict[str, float]:
        """The step's ``mismatch/*`` values (module docstring); {} when no token had a known behaviour log-prob."""
        if self.tokens == 0:
            return {}
        out = {
            "mismatch/log_rho_abs_mean": self.abs_sum / self.tokens,
            "mismatch/log_rho_abs_max": self.abs_max,
            "mismatch/kl_k3": self.k3_sum / self.tokens,
            "mismatch/ess_fraction": ess_fraction(self.seq_log_weights),
            "mismatch/masked_token_fraction": self.masked / self.tokens,
            "mismatch/truncated_token_fraction": self.truncated / self.tokens,
            "mismatch/masked_sequence_fraction": self.masked_sequences / max(1, self.sequences),
        }
        for key, s, n in zip(BUCKET_KEYS, self.bucket_sums, self.bucket_counts):
            out[key] = s / n if n else math.nan
        return out


def ess_fraction(log_weights: Sequence[float]) -> float:
    """Kish's effective sample size over N of weights w_i = exp(log_weights_i), computed stably
    (shifted by the largest log weight, which cancels):

        ESS / N = (sum_i w_i)^2 / (N * sum_i w_i^2)          in [1/N, 1]; NaN for no weights"""
    if not log_weights:
        return math.nan
    top = max(log_weights)
    w = [math.exp(x - top) for x in log_weights]
    return sum(w) ** 2 / (len(w) * sum(x * x for x in w))


def staleness_metrics(versions: Sequence[int | None], current: int) -> dict[str, float]:
    """``mismatch/staleness_mean`` and ``_max``: current - v over the completions whose sampler version v
    is known (policy versions the trainer is ahead of the sampler); {} when none is."""
    lags = [current - v for v in versions if v is not None]
    if not lags:
        return {}
    return {"mismatch/staleness_mean": sum(lags) / len(lags), "mismatch/staleness_max": float(max(lags))}
