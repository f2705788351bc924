"""``reasoning-rl-report <sweep folder>``: every run of a sweep in one table, plus plots.

    reasoning-rl-report sweeps/arithmetic_tiny_sweep
    reasoning-rl-report multirun/arithmetic/2026-12-03_14-00-00 --x algo.kl.beta --series algo.group_size

A run is any folder under the sweep holding a ``config.yaml`` written by
``reasoning-rl-train``. Each gets a row: its setting (the sweep overrides, seed left out),
seed, status (``finished``, ``failed`` with its error, or ``incomplete``: killed or still
running), steps done, final training reward and KL (means over the last tenth of the
steps), held-out accuracy before and after, completion tokens per second, wall time, and
memory: the training state (parameters, gradients, optimiser states of every model held,
``reasoning_rl.memory``) and the peak resident memory; what the health rules said (docs/health.md:
``ok``, the rules that fired, the preflight's findings); when a run audited its verifier
(``task.audit``), the mean ``audit/disagree_rate`` and the summed disagreements of each kind.
No run is dropped: a run without metrics is still listed with its status.

Statistics (reasoning_rl.reporting.stats): per setting, the mean of ``--metric`` (held-out greedy accuracy
after training by default) over its seeds with a 95% bootstrap interval, the collapsed runs counted
(``--collapse-fraction``; a collapsed run stays in the means), and with ``--baseline <setting>`` the paired
difference of each setting to it on the same seeds. When the runs logged the ``mismatch/*`` metrics (an
off-policy sampler: docs/offpolicy.md), their means per setting too:

    reasoning-rl-report sweeps/offpolicy_lab --baseline "algo.correction.name=none,rollout_inject=none"

Written to ``<sweep>/report/``: ``report.md`` (the table), ``runs.json`` and ``runs.csv``
(one record per run), ``reward_curves.png`` (training reward against step, one line per
setting, averaged over seeds) and ``accuracy_vs_<x>.png`` (held-out greedy accuracy after
training against ``--x``, one line per value of ``--series``; by default the swept
``algo.kl.beta`` and ``algo.group_size``).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reasoning_rl.config_checks import ConfigError
from reasoning_rl.reporting.plots import pass_maj_curves, plot_accuracy, plot_pass_maj, plot_reward_curves
from reasoning_rl.reporting.runs import RunRecord, find_runs
from reasoning_rl.reporting.stats import COLLAPSE_FRACTION, format_stats, setting_stats
from reasoning_rl.run_folder.atomic import atomic_write_bytes, atomic_write_text


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
    retained = any(r.retention_after is not None for r in runs)  # likewise for evaluation.retention
    lines = ["| setting | seed | status | steps | reward (last 10%) | KL (last 10%) | greedy before | greedy after "
             "| sampled after | tokens/s | wall | train state | peak RSS | health |"
             + (" audit disagree (ours pass / ours fail) |" if audited else "")
             + (" retention greedy before / after |" if retained else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if audited else "")
             + ("---|" if retained else "")]
    for r in runs:
        status = r.status + (f": {r.error}" if r.error else "") + (f" (collapsed: {r.collapse_reason})"
                                                                    if r.collapsed else "")
        steps = f"{r.steps_done}/{r.steps_total}" if r.steps_total is not None else str(r.steps_done)
        wall = "-" if r.wall_s is None else f"{r.wall_s / 60:.1f} min"
        lines.append(f"| {r.setting} | {r.seed} | {status} | {steps} | {_num(r.final_reward, '.3f')} "
                     f"| {_num(r.final_kl, '.4f')} | {_pct(r.greedy_before)} | {_pct(r.greedy_after)} "
                     f"| {_pct(r.sampled_after)} | {_num(r.tokens_per_s, '.0f')} | {wall} "
                     f"| {_gb(r.state_gb)} | {_gb(r.peak_rss_gb)} | {r.health or '-'} |"
                     + (f" {_audit_cell(r)} |" if audited else "")
                     + (f" {_pct(r.retention_before)} / {_pct(r.retention_after)} |" if retained else ""))
    counts = defaultdict(int)
    for r in runs:
        counts[r.status] += 1
    lines.append("")
    lines.append(f"{len(runs)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines)


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


def _swept(runs: list[RunRecord], key: str) -> bool:
    return len({json.dumps(r.values.get(key)) for r in runs}) > 1


def format_mismatch(runs: list[RunRecord]) -> str | None:
    """Means over each setting's runs of the mismatch metrics (None when no run logged them)."""
    if not any(r.mismatch_log_rho is not None for r in runs):
        return None
    lines = ["| setting | mean \\|log rho\\| | KL(mu \\|\\| pi) k3 | ESS / N | masked tokens "
             "| truncated tokens |", "|---|---|---|---|---|---|"]
    for setting in sorted({r.setting for r in runs}):
        mine = [r for r in runs if r.setting == setting]

        def avg(field: str, mine: list[RunRecord] = mine) -> float | None:
            xs = [getattr(r, field) for r in mine if getattr(r, field) is not None]
            return sum(xs) / len(xs) if xs else None

        lines.append(f"| `{setting}` | {_num(avg('mismatch_log_rho'), '.4f')} | {_num(avg('mismatch_kl_k3'), '.4f')} "
                     f"| {_num(avg('mismatch_ess'), '.3f')} | {_pct(avg('mismatch_masked'))} "
                     f"| {_pct(avg('mismatch_truncated'))} |")
    return "\n".join(lines)


def format_statistics(runs: list[RunRecord], metric: str = "greedy_after", baseline: str | None = None) -> str:
    """The statistics section of report.md (reasoning_rl.reporting.stats)."""
    if metric not in RunRecord.__dataclass_fields__ or metric in ("path", "setting", "status", "values", "error"):
        numeric = [f for f, t in RunRecord.__annotations__.items() if "float" in str(t)]
        raise ConfigError(f"--metric {metric!r} is not a number of the report's runs; choose one of {numeric}")
    pct = metric in ("greedy_before", "greedy_after", "sampled_after")
    paired = f"; paired differences to {baseline} on the same seeds" if baseline else ""
    text = ("Per setting, mean over seeds with a 95% bootstrap interval; collapsed runs counted and kept in the "
            f"means (reasoning_rl.reporting.stats){paired}:\n\n"
            + format_stats(setting_stats(runs, metric, baseline), metric, baseline, pct))
    mismatch = format_mismatch(runs)
    if mismatch is not None:
        text += "\n\nSampler/trainer mismatch, means over each setting's runs of the per-step means:\n\n" + mismatch
    return text


def write_report(sweep_dir: str | Path, x: str | None = None, series: str | None = None,
                 out_dir: str | Path | None = None, baseline: str | None = None, metric: str = "greedy_after",
                 collapse_fraction: float = COLLAPSE_FRACTION) -> dict[str, Any]:
    """Collect the sweep's runs, write the report files; returns their paths and the table."""
    sweep_dir = Path(sweep_dir)
    runs = find_runs(sweep_dir, collapse_fraction)
    if not runs:
        raise FileNotFoundError(f"no run folders (with a config.yaml from reasoning-rl-train) under {sweep_dir}")
    out = Path(out_dir) if out_dir else sweep_dir / "report"
    table = format_table(runs)
    k_table = format_k_table(runs)
    if k_table is not None:
        table += "\n\nHeld-out Pass@K and Maj@K after training (means over seeds):\n\n" + k_table
    table += "\n\n" + format_statistics(runs, metric, baseline)
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
    x = x or ("algo.kl.beta" if _swept(runs, "algo.kl.beta") else None)
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
    parser.add_argument("--x", help="config key on the accuracy plot's x axis (default: algo.kl.beta when swept)")
    parser.add_argument("--series", help="config key with one line per value (default: algo.group_size when swept)")
    parser.add_argument("--out", help="where to write the report (default: <sweep_dir>/report)")
    parser.add_argument("--baseline", help="a setting (its folder name) to compare every other with, paired by seed")
    parser.add_argument("--metric", default="greedy_after", help="the run value the statistics are about "
                        "(a runs.csv column; default: greedy_after, held-out greedy accuracy after training)")
    parser.add_argument("--collapse-fraction", type=float, default=COLLAPSE_FRACTION,
                        help="a run collapsed when its accuracy or reward fell below this times its start "
                        "(or a loss is NaN/inf; reasoning_rl.reporting.stats)")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an input error (docs/errors.md)")
    args = parser.parse_args(pop_debug_flag(list(sys.argv[1:] if argv is None else argv)))
    try:
        written = write_report(args.sweep_dir, args.x, args.series, args.out, args.baseline, args.metric,
                               args.collapse_fraction)
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
