"""Means of one metric over a run's metrics.jsonl rows, its non-finite and missing values left out
(``reasoning-rl-report``'s columns)."""

from __future__ import annotations

import math
from typing import Any


def finite(metrics: list[dict[str, Any]], key: str) -> list[float]:
    """The finite values of ``key``, in step order."""
    return [m[key] for m in metrics if isinstance(m.get(key), (int, float)) and math.isfinite(m[key])]


def tail_mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    """Mean over the last tenth of the values (at least one); None without any."""
    values = finite(metrics, key)
    if not values:
        return None
    tail = values[-max(1, len(values) // 10):]
    return sum(tail) / len(tail)


def head_mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    """Mean over the first tenth of the values (at least one); None without any."""
    values = finite(metrics, key)
    head = values[:max(1, len(values) // 10)]
    return sum(head) / len(head) if head else None


def mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = finite(metrics, key)
    return sum(values) / len(values) if values else None
