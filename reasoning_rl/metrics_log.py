"""Per-step metrics to JSONL (and TensorBoard when installed), completions to JSONL, plots.

Metric keys are namespaced (``reward/mean``, ``loss/policy``, ``kl/mean``,
``clip/low_fraction``, ``time/generate``...); each is described in
``docs/metrics.md``.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reasoning_rl.atomic import atomic_write_bytes, atomic_write_text


class MetricsLogger:
    """Appends one JSON object per step to ``metrics.jsonl``; mirrors scalars to TensorBoard.
    ``enabled=False`` (data-parallel ranks other than 0) touches no file: every call is a no-op."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, resume_step: int | None = None,
                 enabled: bool = True) -> None:
        self.enabled = enabled
        self._tb = None
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
            return
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key != "step" and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)

    def log_completions(self, step: int, rows: Iterable[Mapping[str, Any]]) -> None:
        if not self.enabled:
            return
        with self.completions_path.open("a") as f:
            for row in rows:
                f.write(json.dumps({"step": step, **{k: _plain(v) for k, v in row.items()}}, default=str) + "\n")

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


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


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plot_training_curves(metrics: list[dict[str, Any]], path: Path,
                         keys: tuple[str, ...] = ("reward/mean", "accuracy/train")) -> Path | None:
    """PNG of the given metrics over steps (raw and a moving average)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [k for k in keys if any(k in m for m in metrics)]
    if not present:
        return None
    fig, axes = plt.subplots(1, len(present), figsize=(5 * len(present), 3.5), squeeze=False)
    for ax, key in zip(axes[0], present):
        points = [(m["step"], m[key]) for m in metrics if m.get(key) is not None]
        steps, values = zip(*points) if points else ((), ())
        ax.plot(steps, values, alpha=0.35, label=key)
        window = max(1, len(values) // 10)
        if window > 1:
            smooth = [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
                      for i in range(len(values))]
            ax.plot(steps, smooth, label=f"moving average ({window})")
        ax.set_xlabel("step")
        ax.set_title(key)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)
