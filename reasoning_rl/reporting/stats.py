"""Statistics of the sweep report (``reasoning-rl-report``, reasoning_rl.reporting.report): per setting, the mean over
seeds with a 95% bootstrap interval; paired differences against a named baseline setting on the same seeds;
collapsed runs counted, never dropped.

    mean_s        = 1/n sum_i x_i                              over the n runs of setting s with a value
    95% interval  = the 2.5th and 97.5th percentiles of the mean of n values drawn with replacement from
                    x_1..x_n, over B seeded resamples (Efron's percentile bootstrap; B = 10,000)
    paired diff   = d_j = x_{s, seed j} - x_{baseline, seed j} over the seeds both settings have a value for;
                    its mean and the percentile bootstrap interval of the d_j

With 3 seeds a bootstrap has only 10 distinct resample means, and all three draws equal the smallest seed
with probability 1/27 = 3.7% > 2.5%: the 95% interval of 3 seeds is exactly their range [min, max]. It says
how far the seeds spread, not a test at an exact 95% level. Two settings whose intervals do not overlap differ by more
than their seeds' spread; the paired interval (same seeds, so shared luck cancels) excluding 0 says the same
about the difference.

**Collapse.** A run collapsed when (a) any logged ``loss/total`` or ``loss/policy`` is NaN or infinite, or
(b) its held-out greedy accuracy after training is below ``collapse_fraction`` (default 0.5) times its accuracy
before, or (c) its training reward over the last tenth of the steps is below ``collapse_fraction`` times its
reward over the first tenth. A collapsed run stays in every mean and interval with the values it has (a run
that learned nothing is a result); it is counted per setting. A run without a value (failed before its
evaluation) is counted as missing, also never silently.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasoning_rl.config_checks import ConfigError

BOOTSTRAP_RESAMPLES = 10_000
COLLAPSE_FRACTION = 0.5


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap interval (``low <= mean <= high``); NaN when there is no value."""

    mean: float
    low: float
    high: float
    n: int

    def overlaps(self, other: Interval) -> bool:
        return not (self.high < other.low or other.high < self.low)


def bootstrap_mean(values: Sequence[float], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = 0) -> Interval:
    """The mean of ``values`` and its percentile-bootstrap interval (module docstring); seeded, so the
    report is the same every time. One value: the interval is that value."""
    xs = [float(v) for v in values]
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = sum(xs) / len(xs)
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    return Interval(mean, _percentile(means, tail), _percentile(means, 1.0 - tail), n)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def collapse_reason(losses: Sequence[float | None], greedy_before: float | None, greedy_after: float | None,
                    reward_first: float | None, reward_last: float | None,
                    fraction: float = COLLAPSE_FRACTION) -> str | None:
    """Why a run collapsed (module docstring), or None. ``losses``: every logged loss value (None = absent)."""
    if any(v is not None and not math.isfinite(v) for v in losses):
        return "non-finite loss"
    if greedy_before is not None and greedy_after is not None and greedy_after < fraction * greedy_before:
        return f"held-out accuracy {greedy_after:.1%} < {fraction:g} x {greedy_before:.1%} before"
    if reward_first is not None and reward_last is not None and reward_last < fraction * reward_first:
        return f"training reward {reward_last:.3f} < {fraction:g} x {reward_first:.3f} at the start"
    return None


@dataclass(frozen=True)
class SettingStats:
    """One setting's runs over seeds, for one metric."""

    setting: str
    runs: int
    collapsed: int
    missing: int
    """Runs without a value of the metric (failed, or killed before their evaluation)."""
    value: Interval
    paired: Interval | None = None
    """The paired difference against the baseline (None for the baseline itself or without one)."""


def setting_stats(runs: Sequence[Any], metric: str, baseline: str | None = None) -> list[SettingStats]:
    """Per setting (sorted, the baseline first): the mean of ``metric`` (a RunRecord field) over its runs
    with its bootstrap interval, collapsed and missing runs counted; with ``baseline``, the paired
    difference to it over the seeds both have."""
    by_setting: dict[str, list[Any]] = {}
    for r in runs:
        by_setting.setdefault(r.setting, []).append(r)
    if baseline is not None and baseline not in by_setting:
        raise ConfigError(f"baseline setting {baseline!r} is not in this sweep; its settings: {sorted(by_setting)}")

    def value(r: Any) -> float | None:
        v = getattr(r, metric)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    base = {r.seed: value(r) for r in by_setting.get(baseline, [])}
    order = sorted(by_setting, key=lambda s: (s != baseline, s))
    out = []
    for setting in order:
        mine = by_setting[setting]
        values = [v for v in map(value, mine) if v is not None]
        paired = None
        if baseline is not None and setting != baseline:
            diffs = [value(r) - base[r.seed] for r in mine
                     if value(r) is not None and base.get(r.seed) is not None]
            paired = bootstrap_mean(diffs)
        out.append(SettingStats(setting, len(mine), sum(1 for r in mine if r.collapsed), len(mine) - len(values),
                                bootstrap_mean(values), paired))
    return out


def _ci(i: Interval, pct: bool, signed: bool = False) -> str:
    if i.n == 0:
        return "-"
    fmt = (lambda x: f"{x * 100:+.1f}") if signed and pct else (lambda x: f"{x * 100:.1f}") if pct else (
        lambda x: f"{x:+.3f}") if signed else (lambda x: f"{x:.3f}")
    return f"{fmt(i.mean)} [{fmt(i.low)}, {fmt(i.high)}]"


def format_stats(stats: Sequence[SettingStats], metric: str, baseline: str | None, pct: bool = True) -> str:
    """The statistics table: mean [95% interval] per setting, the paired difference to the baseline."""
    unit = " (%)" if pct else ""
    head = f"| setting | runs | collapsed | missing | {metric}{unit}: mean [95% CI] |"
    rule = "|---|---|---|---|---|"
    if baseline is not None:
        head += f" minus baseline, paired{unit} |"
        rule += "---|"
    lines = [head, rule]
    for s in stats:
        row = f"| `{s.setting}` | {s.runs} | {s.collapsed} | {s.missing} | {_ci(s.value, pct)} |"
        if baseline is not None:
            row += " baseline |" if s.paired is None else f" {_ci(s.paired, pct, signed=True)} (n={s.paired.n}) |"
        lines.append(row)
    return "\n".join(lines)
