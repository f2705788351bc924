"""What an evaluation prints and the ``summary.md`` rebuilt from every results.json of an output folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.evaluate import RESULTS_FILE
from benchmarks.metrics import format_metric
from reasoning_rl.run_folder.atomic import atomic_write_text


def episode_line(r: dict[str, Any]) -> str | None:
    """One printed line of a result's episode metrics (None without ``env=``)."""
    e = r.get("episodes")
    if e is None:
        return None
    within = ", ".join(f"<= {t} turns {format_metric(m)}%" for t, m in e["accuracy_within_turns"].items())
    return (f"  episodes: {e['turns_mean']:.2f} turns, {e['tool_calls_mean']:.2f} tool calls, tool errors "
            f"{100 * e['tool_error_rate']:.1f}%, {e['tool_timeouts']} timeouts, budget cut "
            f"{100 * e['budget_cut_fraction']:.1f}% | accuracy {within}")


def model_label(r: dict[str, Any]) -> str:
    model = r.get("model", {})
    if "samples" in model:
        return f"samples:{Path(model['samples']).name}"
    return str(model.get("name_or_path", "?"))


def result_line(r: dict[str, Any]) -> str:
    """One printed line per result: benchmark, model, correct/samples, accuracy and the other metrics."""
    m = r["metrics"]
    c = m["counts"]
    extra = ", ".join(f"{name} {format_metric(v)}" for name, v in m.items()
                      if name not in ("accuracy", "counts", "breakdown"))
    failures = ", ".join(f"{s}={c[s]}" for s in ("unscorable", "timeout", "error") if c[s])
    by_text = r.get("maj_votes", {}).get("completion", 0)
    votes = (f" | maj@k: {by_text} samples vote by their completion text (the verifier reported no extracted "
             "answer)" if by_text else "")
    return (f"{r['benchmark']['name']} v{r['benchmark']['version']} | {model_label(r)} | "
            f"{c['correct']}/{c['samples']} correct on {c['problems']} problems | accuracy {format_metric(m['accuracy'])}%"
            + (f" | {extra}" if extra else "") + (f" | not scored: {failures}" if failures else "") + votes)


def breakdown_lines(r: dict[str, Any]) -> list[str]:
    """``  level: 1 95.35 ± 3.25 (43) | 2 ...`` per breakdown field (accuracy, percent, problem count)."""
    lines = []
    for field, groups in r["metrics"].get("breakdown", {}).items():
        cells = " | ".join(f"{g} {format_metric(m)} ({m['num_problems']})" for g, m in groups.items())
        lines.append(f"  {field}: {cells}")
    return lines


def grader_summary_rows(r: dict[str, Any]) -> list[str]:
    """One summary.md row per grader of a result's grader-sensitivity report (none without one)."""
    report = r.get("grader_sensitivity")
    if not report:
        return []
    step = r["model"].get("step")
    rows = []
    for name, info in report["graders"].items():
        options = ", ".join(f"{k}={v}" for k, v in info["options"].items())
        vs = report["vs_ours"].get(name, {})
        rows.append(f"| {model_label(r)} | {'' if step is None else step} | {r['benchmark']['name']} | {name} | "
                    f"{info['verifier']}{f' ({options})' if options else ''} | {format_metric(report['accuracy'][name])} "
                    f"| {vs.get('ours_pass_theirs_fail', '-')} | {vs.get('ours_fail_theirs_pass', '-')} "
                    f"| {report['disagree_problems']} |")
    return rows


def write_summary(output_dir: str | Path) -> Path:
    """Rebuild ``<output_dir>/summary.md``: one row per results.json found under the folder."""
    output_dir = Path(output_dir)
    rows, grader_rows = [], []
    for path in sorted(output_dir.glob(f"**/{RESULTS_FILE}")):
        r = json.loads(path.read_text(encoding="utf-8"))
        grader_rows += grader_summary_rows(r)
        m = r["metrics"]
        others = "; ".join(f"{k} {format_metric(v)}" for k, v in m.items() if k not in ("accuracy", "counts", "breakdown"))
        c = m["counts"]
        not_scored = c["unscorable"] + c["timeout"] + c["error"]
        rows.append(f"| {model_label(r)} | {r['model'].get('step') if r['model'].get('step') is not None else ''} | "
                    f"{r['benchmark']['name']} v{r['benchmark']['version']} | {c['problems']} | {c['samples']} | "
                    f"{format_metric(m['accuracy'])} | {others} | {not_scored} | {path.parent.relative_to(output_dir)} |")
    text = ("# Evaluation summary\n\nScores in percent ± standard error over problems.\n\n"
            "| model | step | benchmark | problems | samples | accuracy | other metrics | not scored | folder |\n"
            "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | --- |\n" + "\n".join(rows) + "\n")
    if grader_rows:
        text += ("\n## Grader sensitivity\n\nThe same completions under each grader (`graders=`): accuracy in "
                 "percent ± standard error, samples where the grader and `ours` differ, and the problems where the "
                 "graders disagree (examples in each results.json, `grader_sensitivity`).\n\n"
                 "| model | step | benchmark | grader | verifier | accuracy | ours pass, it fails | ours fails, it passes "
                 "| problems with disagreement |\n"
                 "| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: |\n" + "\n".join(grader_rows) + "\n")
    path = output_dir / "summary.md"
    atomic_write_text(path, text)
    return path
