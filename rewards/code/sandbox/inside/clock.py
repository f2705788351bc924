"""The time limits of one program: a CPU-time budget, and a wall-clock backstop with a stated margin.

``timeout`` (the verifier's, or a stdin/stdout case's) is the CPU time the program may use:
RLIMIT_CPU kills it at ``ceil(timeout)`` CPU seconds (soft = hard limit: SIGKILL), which a loaded
machine does not shorten. A program that sleeps, blocks or hides
its work in child processes uses no CPU of its own; the wall-clock deadline stops it at
``timeout * wall_clock_factor + wall_clock_slack_s`` seconds (Limits; 1.5x + 1 s by default: the
code verifier's 5 s limit waits 8.5 s, below ``score_batch``'s 10 s per item, which would
otherwise report the sample as unscorable). Either way the verdict is ``timeout``.

Standard library only: the host and the jail compute the same deadlines from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

WALL_CLOCK_FACTOR = 1.5
WALL_CLOCK_SLACK_S = 1.0


def cpu_seconds(timeout: float) -> int:
    """RLIMIT_CPU's soft limit for ``timeout``: whole seconds, at least 1."""
    return max(1, math.ceil(timeout))


def wall_seconds(timeout: float, limits: Mapping[str, Any]) -> float:
    """The wall-clock deadline for a program whose CPU budget is ``timeout`` seconds."""
    factor = float(limits.get("wall_clock_factor", WALL_CLOCK_FACTOR))
    slack = float(limits.get("wall_clock_slack_s", WALL_CLOCK_SLACK_S))
    return timeout * factor + slack
