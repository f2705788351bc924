"""Token means of one optimisation step, exact over micro-batches, updates and ranks.

A token statistic (``ratio/mean``, ``clip/low_fraction``, ``entropy/mean``, ...) is a mean
over every completion token the step trained on:

    mean_k = sum_{ranks} sum_{updates} sum_{micro-batches} sum_{tokens} x_k
             / sum_{ranks} sum_{updates} sum_{micro-batches} n_k

:class:`TokenStats` keeps the two sums of each statistic, adds one micro-batch at a time, and
divides only at the end, after ONE all-reduce of all sums and counts together
(:func:`reasoning_rl.distributed.sum_floats`). Nothing is divided early, so there is no
denominator to get wrong: dividing a rank's sum by the global count (what PPO did) logged
``ratio/mean`` = 1/2 on two ranks; a mean of per-micro-batch means weights a short
micro-batch like a long one. Every algorithm logs its token statistics through it (GRPO and
PPO their ratios, clips, KL and entropy; the likelihood algorithms their ``nll/token_mean``),
and every rank gets the global mean (so the run loop's reduction over ranks,
:func:`reasoning_rl.distributed.combine_metrics`, has identical values to combine).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from reasoning_rl import distributed
from reasoning_rl.algo.aggregation import masked_sum


class TokenStats:
    """Sums and token counts of named statistics; :meth:`means` reduces and divides once.

    The names are fixed at construction, in the order every rank all-reduces them (a
    collective: every rank calls :meth:`means` once, with the same names)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.sums = dict.fromkeys(self.names, 0.0)
        self.counts = dict.fromkeys(self.names, 0.0)

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        """Add ``values`` where ``mask`` is set (booleans count as 0/1: a fraction).  # [B, L] each"""
        self._check(name)
        self.sums[name] += float(masked_sum(values.detach().double(), mask))
        self.counts[name] += float(mask.sum())

    def add_mean(self, name: str, mean: float, count: float) -> None:
        """Add a mean already taken over ``count`` tokens (one micro-batch): it weighs ``count``."""
        self._check(name)
        self.sums[name] += float(mean) * float(count)
        self.counts[name] += float(count)

    def means(self, seen_only: bool = False) -> dict[str, float]:
        """Each statistic's global token mean (over every rank); NaN for one that saw no token, or, with
        ``seen_only``, no entry for it. A collective when data-parallel: one all-reduce of every sum and count."""
        reduced = distributed.sum_floats([*self.sums.values(), *self.counts.values()])
        sums, counts = reduced[: len(self.names)], reduced[len(self.names):]
        return {name: s / c if c > 0 else math.nan for name, s, c in zip(self.names, sums, counts)
                if c > 0 or not seen_only}

    def _check(self, name: str) -> None:
        if name not in self.sums:
            raise KeyError(f"token statistic {name!r} was not declared; declared: {list(self.names)}")
