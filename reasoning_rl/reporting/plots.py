"""The sweep report's figures (``reasoning-rl-report``, reasoning_rl.reporting.report): training reward per setting,
held-out accuracy against a swept key, and held-out Pass@K / Maj@K against K."""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_rl.reporting.runs import RunRecord
from reasoning_rl.run_folder.metrics_log import read_metrics


def _mean_curves(records: list[dict[str, float]]) -> dict[str, float]:
    """Per K, the mean over the records that have it."""
    ks = sorted({k for r in records for k in r}, key=int)
    return {k: statistics.mean(r[k] for r in records if k in r) for k in ks}


@dataclass
class KCurves:
    """Held-out Pass@K and Maj@K (by K) of one setting, means over its ``runs`` finished seeds."""

    label: str
    runs: int
    pass_at: dict[str, float]
    maj_at: dict[str, float]


def pass_maj_curves(runs: list[RunRecord]) -> list[KCurves]:
    """After training, one entry per setting; last, "before training": the policies the runs started
    from (mean over every finished run)."""
    done = [r for r in runs if r.status == "finished" and r.pass_after]
    curves = []
    for setting in sorted({r.setting for r in done}):
        mine = [r for r in done if r.setting == setting]
        curves.append(KCurves(setting, len(mine), _mean_curves([r.pass_after for r in mine]),
                              _mean_curves([r.maj_after for r in mine])))
    before = [r for r in done if r.pass_before]
    if before:
        curves.append(KCurves("before training", len(before), _mean_curves([r.pass_before for r in before]),
                              _mean_curves([r.maj_before for r in before])))
    return curves


def plot_pass_maj(runs: list[RunRecord]) -> bytes | None:
    """Held-out Pass@K (left) and Maj@K (right) against K, one line per setting, the policy before
    training dashed (means over seeds)."""
    curves = pass_maj_curves(runs)
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, metric, title in ((axes[0], "pass", "Pass@K"), (axes[1], "maj", "Maj@K")):
        for c in curves:
            values = c.pass_at if metric == "pass" else c.maj_at
            style = {"color": "black", "linestyle": "--"} if c.label == "before training" else {"marker": "o"}
            ax.plot([int(k) for k in values], list(values.values()), label=c.label, **style)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("K (samples per problem)")
        ax.set_title(f"held-out {title}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy")
    axes[1].legend(fontsize=8)
    data = _png(fig)
    plt.close(fig)
    return data


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def plot_reward_curves(sweep_dir: Path, runs: list[RunRecord]) -> bytes | None:
    """Training reward against step, one line per setting (mean over its seeds, smoothed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_setting: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        for m in read_metrics(sweep_dir / r.path / "metrics.jsonl"):
            value = m.get("reward/mean")
            if isinstance(value, (int, float)) and math.isfinite(value):
                by_setting[r.setting][m["step"]].append(value)
    if not by_setting:
        return None
    fig, ax = plt.subplots(figsize=(9, 5))
    for setting, per_step in sorted(by_setting.items()):
        steps = sorted(per_step)
        means = [sum(per_step[s]) / len(per_step[s]) for s in steps]
        window = max(1, len(means) // 20)
        smooth = [sum(means[max(0, i - window + 1):i + 1]) / len(means[max(0, i - window + 1):i + 1])
                  for i in range(len(means))]
        ax.plot(steps, smooth, label=setting)
    ax.set_xlabel("step")
    ax.set_ylabel("training reward (moving average)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    data = _png(fig)
    plt.close(fig)
    return data


def plot_accuracy(runs: list[RunRecord], x: str, series: str | None) -> bytes | None:
    """Held-out greedy accuracy after training against ``x``, one line per value of ``series``
    (mean over seeds; error bars = their standard deviation). Finished runs only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in runs if r.status == "finished" and r.greedy_after is not None and x in r.values]
    if not done:
        return None
    groups: dict[Any, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in done:
        groups[r.values.get(series) if series else None][float(r.values[x])].append(r.greedy_after)
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, points in sorted(groups.items(), key=lambda kv: str(kv[0])):
        xs = sorted(points)
        ys = [statistics.mean(points[v]) for v in xs]
        err = [statistics.pstdev(points[v]) if len(points[v]) > 1 else 0.0 for v in xs]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"{series}={label}" if series else None)
    ax.set_xlabel(x)
    ax.set_ylabel("held-out greedy accuracy after training")
    ax.grid(alpha=0.3)
    if series:
        ax.legend()
    data = _png(fig)
    plt.close(fig)
    return data
