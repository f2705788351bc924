"""Checkpoint sweeps: find a run's ``checkpoint-<step>/`` folders; tabulate and plot accuracy against step."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.io import write_json
from benchmarks.metrics import format_metric
from reasoning_rl.run_folder.atomic import atomic_write_bytes, atomic_write_text

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def find_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` subfolder holding a model, sorted by step."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    found = []
    for child in run_dir.iterdir():
        match = CHECKPOINT_RE.match(child.name)
        if match and child.is_dir() and (child / "config.json").exists():
            found.append((int(match.group(1)), child))
    if not found:
        names = sorted(c.name for c in run_dir.iterdir())[:10]
        raise FileNotFoundError(
            f"no checkpoint-<step>/ folder with a saved model (config.json) in {str(run_dir)!r}; it holds {names}"
        )
    return sorted(found)


def sweep_table(rows: Sequence[dict[str, Any]], metric_names: Sequence[str]) -> str:
    """Markdown table, one line per checkpoint: step, then each metric as ``value ± stderr`` in percent."""
    lines = ["| step | checkpoint | " + " | ".join(metric_names) + " |",
             "| ---: | --- | " + " | ".join("---:" for _ in metric_names) + " |"]
    for row in rows:
        cells = [format_metric(row["metrics"][m]) if m in row["metrics"] else "n/a" for m in metric_names]
        lines.append(f"| {row['step']} | {row['checkpoint']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_sweep(rows: Sequence[dict[str, Any]], metric_names: Sequence[str], title: str) -> bytes:
    """PNG of each metric (percent, with a ±1 standard error band) against training step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    steps = [r["step"] for r in rows]
    for name in metric_names:
        values = [100 * r["metrics"][name]["value"] for r in rows]
        errors = [100 * (r["metrics"][name]["stderr"] if r["metrics"][name]["stderr"] == r["metrics"][name]["stderr"]
                         else 0.0) for r in rows]
        ax.plot(steps, values, marker="o", label=name)
        ax.fill_between(steps, [v - e for v, e in zip(values, errors)], [v + e for v, e in zip(values, errors)],
                        alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("score (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def write_sweep(out_dir: str | Path, benchmark: str, rows: Sequence[dict[str, Any]]) -> dict[str, Path]:
    """Write ``sweep_<benchmark>.{md,json,png}`` in ``out_dir``; return the paths."""
    out_dir = Path(out_dir)
    metric_names = [m for m in rows[0]["metrics"] if m not in ("counts", "breakdown")] if rows else []
    paths = {"table": out_dir / f"sweep_{benchmark}.md", "json": out_dir / f"sweep_{benchmark}.json",
             "plot": out_dir / f"sweep_{benchmark}.png"}
    atomic_write_text(paths["table"], f"# {benchmark}: score against training step\n\n" + sweep_table(rows, metric_names))
    write_json(paths["json"], [{k: r[k] for k in ("step", "checkpoint", "metrics")} for r in rows])
    atomic_write_bytes(paths["plot"], plot_sweep(rows, metric_names, f"{benchmark} vs training step"))
    return paths
