"""``reasoning-rl-report <sweep folder>``: every run of a sweep in one table, plus plots.

    reasoning-rl-report sweeps/arithmetic_tiny_sweep
    reasoning-rl-report multirun/arithmetic/2026-12-03_14-00-00 --x algo.beta --series algo.group_size

A run is any folder under the sweep holding a ``config.yaml`` written by
``reasoning-rl-train``. Each gets a row: its setting (the sweep overrides, seed left out),
seed, status (``finished``, ``failed`` with its error, or ``incomplete``: killed or still
running), steps done, final training reward and KL (means over the last tenth of the
steps), held-out accuracy before and after, completion tokens per second, wall time, and
memory: the training state (parameters, gradients, optimiser states of every model held,
``reasoning_rl.memory``) and the peak resident memory; when a run audited its verifier
(``task.audit``), the mean ``audit/disagree_rate`` and the summed disagreements of each kind.
No run is dropped: a run without metrics is still listed with its status.

Written to ``<sweep>/report/``: ``report.md`` (the table), ``runs.json`` and ``runs.csv``
(one record per run), ``reward_curves.png`` (training reward against step, one line per
setting, averaged over seeds) and ``accuracy_vs_<x>.png`` (held-out greedy accuracy after
training against ``--x``, one line per value of ``--series``; by default the swept
``algo.beta`` and ``algo.group_size``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from reasoning_rl.atomic import atomic_write_bytes, atomic_write_text
from reasoning_rl.metrics_log import read_metrics
from reasoning_rl.run_status import read_status


@dataclass
class RunRecord:
    path: str
    setting: str
    seed: int | None
    status: str
    steps_done: int
    steps_total: int | None
    final_reward: float | None = None
    final_kl: float | None = None
    greedy_before: float | None = None
    greedy_after: float | None = None
    sampled_after: float | None = None
    tokens_per_s: float | None = None
    wall_s: float | None = None
    state_gb: float | None = None
    """Parameters + gradients + optimiser states of every model held (summary.json's memory)."""
    peak_rss_gb: float | None = None
    pass_before: dict[str, float] = field(default_factory=dict)
    """Held-out Pass@K before training, by K (``eval_before.json``'s ``pass@K``)."""
    pass_after: dict[str, float] = field(default_factory=dict)
    maj_before: dict[str, float] = field(default_factory=dict)
    """Held-out Maj@K before training, by K."""
    maj_after: dict[str, float] = field(default_factory=dict)
    audit_disagree_rate: float | None = None
    """Mean over steps of ``audit/disagree_rate`` (``task.audit``); None when the run logged no audit."""
    audit_ours_pass_theirs_fail: int | None = None
    """Sum over steps of ``audit/ours_pass_theirs_fail``: possible false positives of the reward."""
    audit_ours_fail_theirs_pass: int | None = None
    """Sum over steps of ``audit/ours_fail_theirs_pass``: possible false negatives of the reward."""
    error: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    """Every config value, dotted (``algo.beta``), for plotting against."""


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


def _finite(metrics: list[dict[str, Any]], key: str) -> list[float]:
    return [m[key] for m in metrics if isinstance(m.get(key), (int, float)) and math.isfinite(m[key])]


def _tail_mean(metrics: list[dict[str, Any]], key: str) -> float | None:
    values = _finite(metrics, key)
    if not values:
        return None
    tail = values[-max(1, len(values) // 10):]
    return sum(tail) / len(tail)


def _audit(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The verifier audit over the whole run: the mean per-step disagreement rate (steps where both
    verifiers scored something) and the two kinds of disagreement summed; empty without an audit."""
    rates = _finite(metrics, "audit/disagree_rate")
    if not rates and not _finite(metrics, "audit/samples"):
        return {}
    return {"audit_disagree_rate": sum(rates) / len(rates) if rates else None,
            **{f"audit_{k}": int(sum(_finite(metrics, f"audit/{k}")))
               for k in ("ours_pass_theirs_fail", "ours_fail_theirs_pass")}}


def _setting(run_dir: Path) -> str:
    """The settings the sweep varies, as the CLI named the run's folder (``<setting>/seed=<N>/``)."""
    return run_dir.parent.name if run_dir.name.startswith("seed=") else run_dir.name


def _at_k(evaluation: dict[str, Any], metric: str) -> dict[str, float]:
    """``{"1": .., "2": ..}`` from an evaluation's ``<metric>@K`` entries, by increasing K."""
    prefix = f"{metric}@"
    values = {k[len(prefix):]: v for k, v in evaluation.items() if k.startswith(prefix) and k[len(prefix):].isdigit()}
    return dict(sorted(values.items(), key=lambda kv: int(kv[0])))


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:
        return None


def read_run(run_dir: Path, root: Path) -> RunRecord:
    """Everything the report says about one run folder (never raises on a partial folder)."""
    values = _flatten(yaml.safe_load((run_dir / "config.yaml").read_text()) or {})
    status = read_status(run_dir) or {}
    summary = _json(run_dir / "summary.json")
    metrics = read_metrics(run_dir / "metrics.jsonl")
    state = status.get("status")
    if state == "finished" and summary is not None:
        label = "finished"
    elif state == "failed":
        label = "failed"
    else:
        label = "incomplete"
    before, after = _json(run_dir / "eval_before.json") or {}, _json(run_dir / "eval_after.json") or {}
    wall = status.get("wall_s")
    if wall is None and metrics:
        wall = sum(m.get("time/step", 0.0) for m in metrics)
    throughput = [m["throughput/completion_tokens_per_s"] for m in metrics
                  if isinstance(m.get("throughput/completion_tokens_per_s"), (int, float))]
    return RunRecord(
        path=str(run_dir.relative_to(root)), setting=_setting(run_dir),
        seed=values.get("trainer.seed"), status=label,
        steps_done=max((m["step"] for m in metrics), default=0), steps_total=values.get("trainer.steps"),
        final_reward=_tail_mean(metrics, "reward/mean"), final_kl=_tail_mean(metrics, "kl/mean"),
        greedy_before=before.get("greedy_accuracy"), greedy_after=after.get("greedy_accuracy"),
        sampled_after=after.get("sampled_accuracy"),
        tokens_per_s=sum(throughput) / len(throughput) if throughput else None,
        wall_s=wall, state_gb=((summary or {}).get("memory") or {}).get("state_gb"),
        peak_rss_gb=((summary or {}).get("memory") or {}).get("peak_rss_gb"),
        pass_before=_at_k(before, "pass"), pass_after=_at_k(after, "pass"),
        maj_before=_at_k(before, "maj"), maj_after=_at_k(after, "maj"),
        error=" ".join((status.get("error") or "").split())[:200] if label == "failed" else None,
        values=values, **_audit(metrics),
    )


def find_runs(sweep_dir: Path) -> list[RunRecord]:
    """Every run folder under ``sweep_dir`` (a folder with the config.yaml the CLI writes)."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"sweep folder {str(sweep_dir)!r} does not exist")
    runs = [read_run(p.parent, sweep_dir) for p in sorted(sweep_dir.rglob("config.yaml"))
            if "report" not in p.relative_to(sweep_dir).parts and ".hydra" not in p.parts]
    return sorted(runs, key=lambda r: (r.setting, r.seed if r.seed is not None else -1))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _gb(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1024:.0f} MB" if x < 1 else f"{x:.2f} GB")


def _audit_cell(r: RunRecord) -> str:
    """``2.5% (3 / 1)``: mean disagreement rate (ours pass and the audit fails / ours fail and it passes)."""
    if r.audit_ours_pass_theirs_fail is None:
        return "-"
    return f"{_pct(r.audit_disagree_rate)} ({r.audit_ours_pass_theirs_fail} / {r.audit_ours_fail_theirs_pass})"


def format_table(runs: list[RunRecord]) -> str:
    audited = any(r.audit_ours_pass_theirs_fail is not None for r in runs)  # the column only when a run audited
    lines = ["| setting | seed | status | steps | reward (last 10%) | KL (last 10%) | greedy before | greedy after "
             "| sampled after | tokens/s | wall | train state | peak RSS |"
             + (" audit disagree (ours pass / ours fail) |" if audited else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if audited else "")]
    for r in runs:
        status = r.status + (f": {r.error}" if r.error else "")
        steps = f"{r.steps_done}/{r.steps_total}" if r.steps_total is not None else str(r.steps_done)
        wall = "-" if r.wall_s is None else f"{r.wall_s / 60:.1f} min"
        lines.append(f"| {r.setting} | {r.seed} | {status} | {steps} | {_num(r.final_reward, '.3f')} "
                     f"| {_num(r.final_kl, '.4f')} | {_pct(r.greedy_before)} | {_pct(r.greedy_after)} "
                     f"| {_pct(r.sampled_after)} | {_num(r.tokens_per_s, '.0f')} | {wall} "
                     f"| {_gb(r.state_gb)} | {_gb(r.peak_rss_gb)} |" + (f" {_audit_cell(r)} |" if audited else ""))
    counts = defaultdict(int)
    for r in runs:
        counts[r.status] += 1
    lines.append("")
    lines.append(f"{len(runs)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


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


def format_k_table(runs: list[RunRecord]) -> str | None:
    """Pass@K and Maj@K, one row per setting (None when no run measured them)."""
    curves = pass_maj_curves(runs)
    if not curves:
        return None
    ks = sorted({k for c in curves for k in c.pass_at}, key=int)
    shown = [k for k in ks if int(k) in (1, 4, 16, 64) or k == ks[-1]]
    head = " | ".join([f"Pass@{k}" for k in shown] + [f"Maj@{k}" for k in shown])
    lines = [f"| setting | runs | {head} |", "|---|---|" + "---|" * (2 * len(shown))]
    for c in curves:
        cells = [_pct(c.pass_at.get(k)) for k in shown] + [_pct(c.maj_at.get(k)) for k in shown]
        lines.append(f"| {c.label} | {c.runs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


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


def _swept(runs: list[RunRecord], key: str) -> bool:
    return len({json.dumps(r.values.get(key)) for r in runs}) > 1


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


def write_report(sweep_dir: str | Path, x: str | None = None, series: str | None = None,
                 out_dir: str | Path | None = None) -> dict[str, Any]:
    """Collect the sweep's runs, write the report files; returns their paths and the table."""
    sweep_dir = Path(sweep_dir)
    runs = find_runs(sweep_dir)
    if not runs:
        raise FileNotFoundError(f"no run folders (with a config.yaml from reasoning-rl-train) under {sweep_dir}")
    out = Path(out_dir) if out_dir else sweep_dir / "report"
    table = format_table(runs)
    k_table = format_k_table(runs)
    if k_table is not None:
        table += "\n\nHeld-out Pass@K and Maj@K after training (means over seeds):\n\n" + k_table
    written = {"table": table, "runs": len(runs)}
    atomic_write_text(out / "report.md", f"# Sweep report: {sweep_dir}\n\n{table}\n")
    atomic_write_text(out / "runs.json", json.dumps([asdict(r) for r in runs], indent=2, default=str))
    columns = [f for f in RunRecord.__dataclass_fields__ if f != "values"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for r in runs:
        writer.writerow({k: v for k, v in asdict(r).items() if k != "values"})
    atomic_write_text(out / "runs.csv", buffer.getvalue())
    written["report"] = str(out / "report.md")
    curves = plot_reward_curves(sweep_dir, runs)
    if curves is not None:
        atomic_write_bytes(out / "reward_curves.png", curves)
        written["reward_curves"] = str(out / "reward_curves.png")
    k_plot = plot_pass_maj(runs)
    if k_plot is not None:
        atomic_write_bytes(out / "pass_maj_at_k.png", k_plot)
        written["pass_maj_plot"] = str(out / "pass_maj_at_k.png")
    x = x or ("algo.beta" if _swept(runs, "algo.beta") else None)
    if series is None and _swept(runs, "algo.group_size") and x != "algo.group_size":
        series = "algo.group_size"
    if x is not None:
        accuracy = plot_accuracy(runs, x, series)
        if accuracy is not None:
            path = out / f"accuracy_vs_{x.replace('.', '_')}.png"
            atomic_write_bytes(path, accuracy)
            written["accuracy_plot"] = str(path)
    return written


def main(argv: list[str] | None = None) -> int:
    from reasoning_rl.entry_points import DEBUG_FLAG, as_user_error, pop_debug_flag, report_user_error

    parser = argparse.ArgumentParser(prog="reasoning-rl-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a sweep folder (hydra.sweep.dir) or any folder holding run folders")
    parser.add_argument("--x", help="config key on the accuracy plot's x axis (default: algo.beta when swept)")
    parser.add_argument("--series", help="config key with one line per value (default: algo.group_size when swept)")
    parser.add_argument("--out", help="where to write the report (default: <sweep_dir>/report)")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an input error (docs/errors.md)")
    args = parser.parse_args(pop_debug_flag(list(sys.argv[1:] if argv is None else argv)))
    try:
        written = write_report(args.sweep_dir, args.x, args.series, args.out)
    except Exception as exc:
        # Bad input (no run folders, a report folder that cannot be written): one line, exit code 2.
        error = as_user_error(exc, "--out <folder>")
        if error is None:
            raise
        return report_user_error("reasoning-rl-report", error, exc)
    print(written.pop("table"))
    for key, path in written.items():
        if key != "runs":
            print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
