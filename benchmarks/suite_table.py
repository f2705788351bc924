"""The tables of a suite, made from its members' ``results.json``: the score table of one model (a row
per benchmark and the suite average, each with its 95% interval), the paired comparison of several
models, and the grader-sensitivity table. The numbers come from each result's per-problem verdicts
(``problems[i].correct``), so a table can be rebuilt from the result files alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.intervals import Interval, average_interval, paired_difference, score_interval
from benchmarks.metrics import format_metric
from benchmarks.passk import spectrum
from benchmarks.table import Table, cell, signed_cell


def verdicts(result: Mapping[str, Any]) -> list[list[bool]]:
    """``correct[i][j]`` of one result: problem i, sample j."""
    return [list(p["correct"]) for p in result["problems"]]


def samples_per_problem(result: Mapping[str, Any]) -> int:
    return min((len(p["correct"]) for p in result["problems"]), default=0)


def metric_name(n: int) -> str:
    """``avg@16`` for sampled rows, ``acc`` for one sample (greedy)."""
    return f"avg@{n}" if n > 1 else "acc"


def score_table(suite_name: str, label: str, results: Sequence[Mapping[str, Any]], total: int,
                replicates: int = 1000, level: float = 0.95, seed: int = 0) -> Table:
    """One row per finished member: problems, samples per problem, the score (avg@n or accuracy) with its
    interval (bootstrap over problems and samples), pass@n; then the unweighted suite average. While the
    suite runs (``len(results) < total``) the caption says how many members are done."""
    pct = round(100 * level)
    table = Table(caption=f"{suite_name}: {label}" + (f" (partial: {len(results)} of {total} benchmarks)"
                                                      if len(results) < total else ""),
                  columns=["benchmark", "problems", "n", "metric", f"score % [{pct}% CI]", "pass@n %"])
    scores, reps, rows_data = [], [], []
    for r in results:
        correct = verdicts(r)
        n = samples_per_problem(r)
        iv, rep = score_interval(correct, replicates, seed, level)
        curve = spectrum(correct) if n > 1 else []
        scores.append(iv.value)
        reps.append(rep)
        name = r["benchmark"]["name"]
        table.rows.append([name, str(len(correct)), str(n), metric_name(n), cell(iv),
                           f"{100 * curve[-1]:.1f}" if curve else "-"])
        rows_data.append({"benchmark": name, "version": r["benchmark"]["version"], "problems": len(correct), "n": n,
                          "metric": metric_name(n), "score": iv.as_dict(), "pass_at_k": curve,
                          "stderr": r["metrics"]["accuracy"]["stderr"]})
    average = average_interval(scores, reps, level) if scores else None
    if average is not None:
        table.rows.append([f"average ({len(results)})", "", "", "mean", cell(average), ""])
    table.notes = [f"Scores in percent; {pct}% percentile bootstrap intervals ({replicates} replicates) over problems "
                   "and, for avg@n, over the samples of each problem. The average is unweighted over benchmarks. "
                   "pass@n is the unbiased estimator at k = n."]
    table.data = {"suite": suite_name, "model": label, "finished": len(results), "members": total,
                  "benchmarks": rows_data, "average": average.as_dict() if average else None}
    return table


def _aligned(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[list[bool]], list[list[bool]]]:
    """Both results' verdicts on the problems they share, in A's order (the same problems, the same seeds)."""
    by_id = {p["task_id"]: list(p["correct"]) for p in b["problems"]}
    shared = [p for p in a["problems"] if p["task_id"] in by_id]
    return [list(p["correct"]) for p in shared], [by_id[p["task_id"]] for p in shared]


def compare_table(suite_name: str, results: Mapping[str, Sequence[Mapping[str, Any]]], replicates: int = 1000,
                  level: float = 0.95, seed: int = 0) -> Table:
    """Per benchmark: each model's score and each later model minus the first, with the paired bootstrap
    interval; ``*`` marks a difference whose interval excludes 0. Then the average difference."""
    labels = list(results)
    base = labels[0]
    pct = round(100 * level)
    table = Table(caption=f"{suite_name}: paired comparison against {base}",
                  columns=["benchmark", "n", *labels, *[f"{lab} - {base} [{pct}% CI]" for lab in labels[1:]]])
    diffs: dict[str, list[tuple[Interval, Any]]] = {lab: [] for lab in labels[1:]}
    rows_data = []
    for i, ra in enumerate(results[base]):
        name = ra["benchmark"]["name"]
        row = [name, str(samples_per_problem(ra))]
        row += [f"{100 * score_interval(verdicts(r[i]), 1)[0].value:.1f}" for r in results.values()]
        data: dict[str, Any] = {"benchmark": name, "scores": {}, "differences": {}}
        for lab in labels:
            data["scores"][lab] = score_interval(verdicts(results[lab][i]), 1)[0].value
        for lab in labels[1:]:
            a, b = _aligned(ra, results[lab][i])
            iv, rep = paired_difference(a, b, replicates, seed, level)
            diffs[lab].append((iv, rep))
            row.append(signed_cell(iv))
            data["differences"][lab] = {**iv.as_dict(), "problems": len(a), "significant": iv.excludes_zero}
        table.rows.append(row)
        rows_data.append(data)
    if results[base]:
        row = ["average", ""] + [""] * len(labels)
        average = {}
        for lab in labels[1:]:
            iv = average_interval([d.value for d, _ in diffs[lab]], [r for _, r in diffs[lab]], level)
            row.append(signed_cell(iv))
            average[lab] = iv.as_dict()
        table.rows.append(row)
    table.notes = [f"Scores in percent; differences with {pct}% paired bootstrap intervals ({replicates} replicates): "
                   "both models resampled on the same problems and sample seeds. * marks an interval excluding 0."]
    table.data = {"suite": suite_name, "base": base, "models": labels, "benchmarks": rows_data,
                  "average_difference": average if results[base] else {}}
    return table


def grader_table(suite_name: str, label: str, results: Sequence[Mapping[str, Any]]) -> Table | None:
    """One row per (benchmark, grader) of the members that have a grader-sensitivity report."""
    table = Table(caption=f"{suite_name}: grader sensitivity, {label}",
                  columns=["benchmark", "grader", "accuracy % (± s.e.)", "ours pass, it fails", "ours fails, it passes",
                           "problems with disagreement"])
    for r in results:
        report = r.get("grader_sensitivity")
        if not report:
            continue
        for name in report["graders"]:
            vs = report["vs_ours"].get(name, {})
            table.rows.append([r["benchmark"]["name"], name, format_metric(report["accuracy"][name]),
                               str(vs.get("ours_pass_theirs_fail", "-")), str(vs.get("ours_fail_theirs_pass", "-")),
                               str(report["disagree_problems"])])
        table.data.setdefault("benchmarks", {})[r["benchmark"]["name"]] = report
    return table if table.rows else None
