"""The verifier audit: seeded samples, hand-counted disagreements, merged rounds."""

from __future__ import annotations

import math
import time

import pytest

from rewards.audit import AuditReport, PendingAudit, VerifierAudit, audit_sample, compare, merge
from rewards.pool import WorkerPool
from rewards.specs import AuditConfig
from rewards.types import VerifierResult

ok = VerifierResult.ok


def test_sample_size_and_seeding() -> None:
    # round(0.1 * 64) = 6 (6.4); at least one when the fraction is positive; none at 0.
    first = audit_sample(64, 0.1, seed=0, step_seed=3)
    assert len(first) == 6 and first == sorted(first) and len(set(first)) == 6
    assert audit_sample(64, 0.1, seed=0, step_seed=3) == first  # a rerun audits the same ones
    assert audit_sample(64, 0.1, seed=0, step_seed=4) != first  # another step, another sample
    assert len(audit_sample(5, 0.01, 0, 0)) == 1
    assert audit_sample(5, 0.0, 0, 0) == [] and audit_sample(0, 0.5, 0, 0) == []
    assert audit_sample(4, 1.0, 0, 0) == [0, 1, 2, 3]


def test_compare_counts_each_direction_by_hand() -> None:
    # Audited completions 0, 2, 3, 5 of six. ours pass/fail vs theirs:
    #   0: pass / pass  (agree)      2: pass / fail  (ours_pass_theirs_fail)
    #   3: fail / pass  (ours_fail_theirs_pass)      5: pass / unscorable (left out)
    # disagree_rate = 2 disagreements / 3 audited that both scored.
    ours = [ok(1.0, extracted="4"), ok(0.0), ok(1.0, extracted="1/2"), ok(0.0, extracted="0.5"), ok(1.0), ok(1.0)]
    theirs = [ok(1.0), ok(0.0, extracted=None), ok(1.0, extracted="0.5"), VerifierResult.unscorable("no reference")]
    report = compare([0, 2, 3, 5], [f"c{i}" for i in range(6)], ours, theirs, "math")
    assert report.metrics == {"audit/samples": 4, "audit/unscorable": 1, "audit/ours_pass_theirs_fail": 1,
                              "audit/ours_fail_theirs_pass": 1, "audit/disagree_rate": pytest.approx(2 / 3)}
    assert [(r["index"], r["verdict"]) for r in report.rows] == [(2, "ours_pass_theirs_fail"),
                                                               (3, "ours_fail_theirs_pass")]
    assert report.rows[0]["ours"]["extracted"] == "1/2" and report.rows[1]["theirs"]["extracted"] == "0.5"
    assert report.rows[0]["completion"] == "c2" and report.rows[0]["theirs"]["verifier"] == "math"


def test_merge_adds_counts_and_recomputes_the_rate() -> None:
    a = AuditReport({"audit/samples": 2, "audit/unscorable": 0, "audit/ours_pass_theirs_fail": 1,
                     "audit/ours_fail_theirs_pass": 0, "audit/disagree_rate": 0.5, "audit/seconds": 0.25}, [{"i": 1}])
    b = AuditReport({"audit/samples": 3, "audit/unscorable": 1, "audit/ours_pass_theirs_fail": 0,
                     "audit/ours_fail_theirs_pass": 0, "audit/disagree_rate": 0.0, "audit/seconds": 0.5}, [])
    merged = merge([a, b])
    # 1 disagreement over (2 + 3 - 1) = 4 completions both scored.
    assert merged.metrics["audit/disagree_rate"] == 0.25 and merged.metrics["audit/seconds"] == 0.75
    assert merged.rows == [{"i": 1}] and merge([]).metrics == {}
    assert math.isnan(compare([0], ["x"], [ok(1.0)], [VerifierResult.unscorable("?")], "v").metrics["audit/disagree_rate"])


def test_math_audit_with_the_strict_extraction_finds_the_format_disagreement() -> None:
    # Ours (lenient) takes the last number of "the sum is 12"; the strict checker needs an explicit
    # answer marker, so it scores 0: one ours_pass_theirs_fail. "\\boxed{12}" passes both.
    from rewards.registry import get_verifier

    completions = ["the sum is 12", "\\boxed{12}"]
    ours_verifier = get_verifier("math")
    ours = [ours_verifier(c, "12") for c in completions]
    audit = VerifierAudit(AuditConfig(verifier="math", fraction=1.0, options={"strict": True}))
    with WorkerPool(1) as pool:
        report = audit.run(completions, ["12", "12"], [{}, {}], ours, step_seed=0, pool=pool)
    assert (report.metrics["audit/ours_pass_theirs_fail"], report.metrics["audit/ours_fail_theirs_pass"]) == (1, 0)
    assert report.metrics["audit/disagree_rate"] == 0.5 and report.metrics["audit/seconds"] > 0
    assert [r["completion"] for r in report.rows] == ["the sum is 12"]


def test_bad_audit_settings_say_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"task\.audit\.verifier is null"):
        VerifierAudit(AuditConfig())
    with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\]"):
        VerifierAudit(AuditConfig(verifier="math", fraction=1.5))
    if not _has_math_verify():  # the optional `compare` extra: the error names the install command
        with pytest.raises(ValueError, match="math-verify"):
            VerifierAudit(AuditConfig(verifier="math_verify"))


def _has_math_verify() -> bool:
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


def test_submitted_audit_runs_while_the_caller_works() -> None:
    # The audit takes 1.0 s; the caller works 1.0 s meanwhile, so collecting it waits far less
    # than 1.0 s (serially it would wait the whole second).
    def slow() -> AuditReport:
        time.sleep(1.0)
        return AuditReport({"audit/samples": 1}, [])

    start = time.perf_counter()
    pending = PendingAudit(slow)
    assert time.perf_counter() - start < 0.5  # submit returns at once
    time.sleep(1.0)  # the step's remaining work
    assert pending.metrics["audit/samples"] == 1
    assert pending.metrics["audit/wait_seconds"] < 0.5
    serial = PendingAudit(slow, asynchronous=False)
    assert serial.report().metrics["audit/wait_seconds"] >= 1.0  # all of it, in the constructor


def test_an_audit_that_fails_raises_when_collected() -> None:
    def broken() -> AuditReport:
        raise RuntimeError("second verifier broke")

    pending = PendingAudit(broken)
    with pytest.raises(RuntimeError, match="second verifier broke"):
        pending.report()


def test_submit_gives_the_same_report_as_run_and_calls_on_done() -> None:
    from rewards.registry import get_verifier

    completions = ["the sum is 12", "\\boxed{12}"]
    ours_verifier = get_verifier("math")
    ours = [ours_verifier(c, "12") for c in completions]
    audit = VerifierAudit(AuditConfig(verifier="math", fraction=1.0, options={"strict": True}))
    done: list[AuditReport] = []
    with WorkerPool(1) as pool:
        pending = audit.submit(completions, ["12", "12"], [{}, {}], ours, step_seed=0, pool=pool, on_done=done.append)
        report = pending.report()
        direct = audit.run(completions, ["12", "12"], [{}, {}], ours, step_seed=0, pool=pool)
    assert done == [report] and report.rows == direct.rows
    assert {k: v for k, v in report.metrics.items() if "seconds" not in k} == \
        {k: v for k, v in direct.metrics.items() if "seconds" not in k}
    assert merge([pending]).metrics["audit/ours_pass_theirs_fail"] == 1  # a pending audit merges like a report
