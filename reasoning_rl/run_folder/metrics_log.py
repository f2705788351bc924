"""Per-step metrics to JSONL (and TensorBoard when installed), completions to JSONL, the run's picture.

Metric keys are namespaced (``reward/mean``, ``loss/policy``, ``kl/mean``,
``clip/low_fraction``, ``time/generate``...); each is described in
``docs/metrics.md``.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reasoning_rl.run_folder.atomic import atomic_write_bytes, atomic_write_text


class MetricsSink(Protocol):
    """Something that reads every step's metrics after metrics.jsonl holds them: the health monitor
    (reasoning_rl.health), an experiment tracker (reasoning_rl.trackers). Its values are as computed
    (a NaN stays NaN); it may raise to stop the run (the health rules of ``trainer.health.stop_on``)."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl``; mirrors scalars to TensorBoard; then
    hands the step to each of ``sinks`` (reasoning_rl.run_folder.log builds them from the config).
    ``enabled=False`` (data-parallel ranks other than 0) touches no file; its sinks, which write nothing
    there either, still see every step's (global) metrics, so that every rank stops at the same step when a
    health rule of ``trainer.health.stop_on`` fires."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_step: int | None = None,
                 enabled: bool = True) -> None:
        self.enabled = enabled
        self._tb = None
        self.sinks: list[MetricsSink] = []
        if not enabled:
            return
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.completions_path = self.run_dir / "completions.jsonl"
        if resume_step is not None:
            # Drop lines written after the checkpoint we resume from, so the log has each step once.
            for path in (self.metrics_path, self.completions_path):
                _truncate_after_step(path, resume_step)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
            except ImportError:
                self._tb = None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if not self.enabled:
            self._to_sinks(step, metrics)
            return
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step" and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
        self._to_sinks(step, metrics)

    def _to_sinks(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self.sinks:
            raw = {k: _scalar(v) for k, v in metrics.items()}
            for sink in self.sinks:
                sink.log(step, raw)

    def add_sinks(self, sinks: Sequence[MetricsSink]) -> None:
        self.sinks.extend(sinks)

    def log_completions(self, step: int, rows: Iterable[Mapping[str, Any]]) -> None:
        if not self.enabled:
            return
        with self.completions_path.open("a") as f:
            for row in rows:
                f.write(json.dumps({"step": step, **{k: _plain(v) for k, v in row.items()}}, default=str) + "\n")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        for sink in self.sinks:
            sink.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _truncate_after_step(path: Path, step: int) -> None:
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def _scalar(value: Any) -> Any:
    """A 0-d tensor or array as its Python number; anything else unchanged."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value


def _plain(value: Any) -> Any:
    value = _scalar(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class Panel:
    """One panel of the run's picture: a title and the metric keys it draws, each with its legend label."""

    title: str
    series: tuple[tuple[str, str], ...]
    """(metric key, legend label) pairs."""


DASHBOARD: tuple[Panel, ...] = (
    Panel("reward and train accuracy", (("reward/mean", "reward/mean"), ("accuracy/train", "accuracy/train"))),
    Panel("held-out accuracy", (("eval/greedy_accuracy", "greedy"), ("eval/sampled_accuracy", "sampled"),
                                ("eval/retention/greedy_accuracy", "second task, greedy (retention)"))),
    Panel("KL per token", (("kl/mean", "to reference (k3)"), ("kl/base_forward", "to base, forward"))),
    Panel("entropy per token", (("entropy/mean", "entropy/mean"),)),
    Panel("completion length (tokens)", (("completion/length_mean", "mean"), ("completion/length_max", "max"))),
    Panel("clip fraction", (("clip/low_fraction", "low (A < 0)"), ("clip/high_fraction", "high (A > 0)"))),
    Panel("NLL per token", (("nll/token_mean", "nll/token_mean"),)),
    Panel("DPO pairs", (("dpo/pair_accuracy", "pair accuracy"),)),
)
"""The panels of ``reward_curve.png``, in reading order; a panel none of whose keys the run logged
is left out (GRPO, PPO, SFT and DPO log different keys), so the picture never fails on a missing one."""


SMOOTH_FROM = 50
"""A series with at least this many points is drawn faint, under its moving average over a tenth of them."""


def dashboard_panels(metrics: list[dict[str, Any]],
                     panels: tuple[Panel, ...] = DASHBOARD) -> list[tuple[str, list[tuple[str, str]]]]:
    """The panels to draw for these metrics: each with the series that have at least one value."""
    logged = {k for m in metrics for k, v in m.items() if v is not None}
    out = []
    for panel in panels:
        series = [(key, label) for key, label in panel.series if key in logged]
        if series:
            out.append((panel.title, series))
    return out


def with_heldout_ends(metrics: list[dict[str, Any]], before: Mapping[str, Any], after: Mapping[str, Any],
                      last_step: int) -> list[dict[str, Any]]:
    """``metrics`` with the held-out evaluations before training (as step 0) and after it (as
    ``last_step``, unless ``evaluation.every`` already logged one there) added as ``eval/*`` rows,
    so the held-out panel runs from the start to the end even without ``evaluation.every``."""
    evaluated = {m["step"] for m in metrics if any(k.startswith("eval/") for k in m)}
    ends = [(step, result) for step, result in ((0, before), (last_step, after)) if step not in evaluated]
    rows = [{"step": step, **{f"eval/{k}": v for k, v in result.items()}} for step, result in ends]
    return sorted([*metrics, *rows], key=lambda m: m["step"])


def plot_training_curves(metrics: list[dict[str, Any]], path: Path, panels: tuple[Panel, ...] = DASHBOARD,
                         health: list[dict[str, Any]] | None = None) -> Path | None:
    """``reward_curve.png``: the run at a glance, one panel per entry of ``panels`` the run logged,
    three to a row. A series of ``SMOOTH_FROM`` points or more is drawn faint with its moving
    average on top; one logged every N steps only (held-out accuracy, KL to base) with markers.
    Each health rule that fired (``health``: health.jsonl's rows; by default those of the
    health.jsonl next to ``path``) is a red dotted line at its step on every panel, named on
    the panels that draw one of its keys (on the first panel when none does).
    None (no file) when the run logged none of the keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = dashboard_panels(metrics, panels)
    if not present:
        return None
    cols = min(3, len(present))
    rows = math.ceil(len(present) / cols)
    all_steps = {m["step"] for m in metrics}
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.2 * rows), squeeze=False)
    marks = health_marks(_health_rows(Path(path)) if health is None else health, present)
    for i, (ax, (title, series)) in enumerate(zip(axes.flat, present)):
        for step, label in marks[i]:
            ax.axvline(step, color="tab:red", linestyle=":", alpha=0.7, linewidth=1)
            if label:
                ax.annotate(label, (step, 1), xycoords=("data", "axes fraction"), fontsize=7,
                            color="tab:red", rotation=90, va="top", ha="right")
        for (key, label), style in zip(series, ("-", "--", ":")):  # dashed second: equal curves stay visible
            points = [(m["step"], m[key]) for m in metrics if m.get(key) is not None]
            steps, values = (list(x) for x in zip(*points))
            if len(values) >= SMOOTH_FROM:
                window = len(values) // 10
                line, = ax.plot(steps, values, alpha=0.25, linestyle=style)
                ax.plot(steps, _moving_average(values, window), color=line.get_color(), linestyle=style,
                        label=f"{label} (avg of {window})")
            else:
                sparse = len(values) < 0.9 * len(all_steps)  # logged every N steps: mark each point
                ax.plot(steps, values, marker="o" if sparse else None, markersize=3, linestyle=style, label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(present):]:
        ax.set_visible(False)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)


def _health_rows(png: Path) -> list[dict[str, Any]]:
    """The rows of the health.jsonl beside the picture (reasoning_rl.health), none without one."""
    path = png.parent / "health.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def health_marks(rows: list[dict[str, Any]],
                 present: list[tuple[str, list[tuple[str, str]]]]) -> list[list[tuple[int, str | None]]]:
    """Per panel of ``present``, the (step, label) of each health rule that fired: every panel marks the
    step; the label (the rule's name) goes on the panels drawing one of its keys, or the first when none does."""
    keys = [{key for key, _ in series} for _, series in present]
    marks: list[list[tuple[int, str | None]]] = [[] for _ in present]
    for row in (r for r in rows if r.get("event") == "fired"):
        shown = [i for i, k in enumerate(keys) if k & set(row.get("keys", ()))] or [0]
        for i in range(len(present)):
            marks[i].append((row["step"], row["rule"] if i in shown else None))
    return marks


def _moving_average(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each point (fewer at the start)."""
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]
