"""The sweep report's verifier-audit column (``task.audit`` metrics in metrics.jsonl)."""

from __future__ import annotations

import json

import yaml

from reasoning_rl.reporting import report


def _run(run_dir, seed, steps):
    """A finished run folder with the given metrics.jsonl rows."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"trainer": {"seed": seed, "steps": len(steps)}}))
    (run_dir / "status.json").write_text(json.dumps({"status": "finished", "wall_s": 1.0}))
    (run_dir / "summary.json").write_text(json.dumps({"memory": {}}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "reward/mean": 0.5, **m}) + "\n"
                                                   for i, m in enumerate(steps)))


def test_audit_column_means_the_rate_and_sums_the_disagreements(tmp_path):
    audited = [
        {"audit/samples": 10, "audit/disagree_rate": 0.1, "audit/ours_pass_theirs_fail": 1,
         "audit/ours_fail_theirs_pass": 0},
        # Both verifiers scored nothing this step: the rate is NaN (null in metrics.jsonl) and is left out.
        {"audit/samples": 10, "audit/disagree_rate": None, "audit/ours_pass_theirs_fail": 0,
         "audit/ours_fail_theirs_pass": 0},
        {"audit/samples": 10, "audit/disagree_rate": 0.3, "audit/ours_pass_theirs_fail": 2,
         "audit/ours_fail_theirs_pass": 1},
    ]
    _run(tmp_path / "audit=on" / "seed=0", 0, audited)
    _run(tmp_path / "audit=off" / "seed=0", 0, [{}, {}])
    assert report.main([str(tmp_path)]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| audit disagree (ours pass / ours fail) |" in text
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| audit=")}
    # rate: (0.1 + 0.3) / 2 = 20.0%; ours pass, audit fails: 1 + 0 + 2 = 3; ours fails, audit passes: 0 + 0 + 1 = 1.
    assert rows["| audit=on"].endswith(" 20.0% (3 / 1) |")
    assert rows["| audit=off"].endswith(" - |")
    records = {r["setting"]: r for r in json.loads((tmp_path / "report" / "runs.json").read_text())}
    assert records["audit=on"]["audit_disagree_rate"] == 0.2
    assert (records["audit=on"]["audit_ours_pass_theirs_fail"], records["audit=on"]["audit_ours_fail_theirs_pass"]) \
        == (3, 1)
    assert records["audit=off"]["audit_disagree_rate"] is None


def test_no_audit_no_column(tmp_path):
    _run(tmp_path / "a" / "seed=0", 0, [{}, {}])
    assert report.main([str(tmp_path)]) == 0
    header = next(line for line in (tmp_path / "report" / "report.md").read_text().splitlines()
                  if line.startswith("| setting |"))
    assert header.endswith("| peak RSS | health |")
