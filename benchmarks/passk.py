"""The pass@k spectrum: pass@k for every k = 1..n, and a PNG with one curve per checkpoint.

It is the diagnostic for "RL raised pass@1 and lowered pass@k" (Yue et al. 2025, arXiv 2504.13837):
a checkpoint whose curve starts higher but ends lower sharpened its sampling distribution and lost
coverage. Each point is the mean over problems of the unbiased per-problem estimate
``1 - C(n - c, k) / C(n, k)`` (:func:`benchmarks.metrics.pass_at_k`, Chen et al. 2021).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.metrics import pass_at_k
from reasoning_rl.run_folder.atomic import atomic_write_bytes


def spectrum(correct: Sequence[Sequence[bool]]) -> list[float]:
    """``[pass@1, ..., pass@n]`` over problems, ``n`` the fewest samples any problem has."""
    n = min((len(c) for c in correct), default=0)
    return [sum(pass_at_k(len(c), sum(c), k) for c in correct) / len(correct) for k in range(1, n + 1)]


def write_spectrum_png(path: str | Path, curves: Mapping[str, Mapping[str, Sequence[float]]]) -> Path | None:
    """One panel per benchmark (``curves[benchmark][checkpoint] = spectrum``), one line per checkpoint,
    k on a log2 axis. Benchmarks with n = 1 have no spectrum and no panel; none at all writes nothing."""
    import matplotlib  # the plotting backend loads only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {b: c for b, c in curves.items() if any(len(s) > 1 for s in c.values())}
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), dpi=100, squeeze=False)
    for ax, (benchmark, by_model) in zip(axes[0], panels.items()):
        for label, values in by_model.items():
            ks = list(range(1, len(values) + 1))
            ax.plot(ks, [100 * v for v in values], marker="o", markersize=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(benchmark)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)
