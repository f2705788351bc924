"""One metrics dict per step from every rank's: summed, maxed, token-weighted or averaged by key
(``reasoning_rl.distributed``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch.distributed as dist

from reasoning_rl.distributed.process_group import is_distributed, world_size

SUMMED_METRICS = ("loss/", "completion/tokens", "verifier/", "dynamic/groups_kept", "dynamic/wasted_rollouts")
"""Key prefixes summed over ranks: losses (each rank's is its share of the global batch loss, the
denominators being global) and counts."""
MAX_METRICS = ("time/", "completion/length_max", "rollout/logprob_mismatch_max", "rollout/policy_version")
"""Key prefixes whose maximum over ranks is logged: times (the slowest rank sets the pace), maxima."""
TOKEN_WEIGHTED_METRICS = ("kl/", "clip/", "ratio/", "entropy/", "rollout/logprob_mismatch_mean")
"""Key prefixes that are token means: averaged over ranks weighted by each rank's ``completion/tokens``."""


def metric_reduction(key: str) -> str:
    """How ``key`` is combined over ranks: sum, max, token_mean or mean (the default:
    every rank holds the same number of prompts and samples)."""
    for op, prefixes in (("sum", SUMMED_METRICS), ("max", MAX_METRICS), ("token_mean", TOKEN_WEIGHTED_METRICS)):
        if key.startswith(prefixes):
            return op
    return "mean"


def combine_metrics(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One metrics dict from every rank's (pure: see :func:`metric_reduction`). Missing, non-numeric
    and non-finite values are left out of a key's reduction; a key with none left keeps rank 0's value."""
    keys = list(dict.fromkeys(k for m in per_rank for k in m))
    weights = [float(m.get("completion/tokens") or 0.0) for m in per_rank]
    out: dict[str, Any] = {}
    for key in keys:
        pairs = [(m[key], w) for m, w in zip(per_rank, weights) if isinstance(m.get(key), (int, float))
                 and not isinstance(m.get(key), bool) and math.isfinite(m[key])]
        if not pairs:
            out[key] = per_rank[0].get(key)
            continue
        values = [float(v) for v, _ in pairs]
        op = metric_reduction(key)
        integral = all(isinstance(v, int) for v, _ in pairs)  # counts and versions stay integers
        if op == "sum":
            out[key] = int(sum(values)) if integral else sum(values)
        elif op == "max":
            out[key] = int(max(values)) if integral else max(values)
        elif op == "token_mean" and sum(w for _, w in pairs) > 0:
            out[key] = sum(v * w for v, (_, w) in zip(values, pairs)) / sum(w for _, w in pairs)
        else:
            out[key] = sum(values) / len(values)
    return out


def reduce_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The step's metrics over all ranks (:func:`combine_metrics`), on every rank."""
    if not is_distributed():
        return dict(metrics)
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, dict(metrics))
    return combine_metrics(out)
