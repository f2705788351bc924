"""The health column of reasoning-rl-report: ok, the rules that fired (open or cleared), the preflight."""

import json

import yaml

from reasoning_rl.health.summary import health_summary
from reasoning_rl.reporting.report import find_runs, format_table


def _run(path, rows):
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"trainer": {"seed": 0, "steps": 10}}))
    if rows is not None:
        (path / "health.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_report_shows_what_the_rules_said_about_each_run(tmp_path):
    _run(tmp_path / "old", None)  # trained before the rules existed
    _run(tmp_path / "quiet", [])
    _run(tmp_path / "loud", [
        {"step": 0, "rule": "zero_variance", "event": "preflight"},
        {"step": 16, "rule": "truncation", "event": "fired"},
        {"step": 25, "rule": "truncation", "event": "cleared"},
        {"step": 30, "rule": "kl_runaway", "event": "fired"},
        {"step": 40, "rule": "truncation", "event": "fired"},
    ])
    assert health_summary(tmp_path / "old") is None
    assert health_summary(tmp_path / "quiet") == "ok"
    assert health_summary(tmp_path / "loud") == "truncation@16 (open), kl_runaway@30 (open); preflight: zero_variance"
    table = format_table(find_runs(tmp_path))
    assert "| peak RSS | health |" in table
    cells = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert cells["quiet"].endswith("| ok |") and cells["old"].endswith("| - |")
