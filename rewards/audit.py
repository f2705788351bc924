"""Verifier audit: a second, independent verifier re-scores a seeded sample of each step's completions.

A verifier false negative silently teaches the policy to avoid a correct format; a false positive
rewards a wrong answer. Neither shows in the reward curve. The audit makes them visible while
training: for a sample of ``fraction`` of the step's completions (seeded by the step, so a rerun
audits the same ones) it compares the reward's first component ("ours": the verifier that
defines accuracy) with another verifier ("theirs"), and reports

* ``audit/ours_pass_theirs_fail`` -- possible false positives of ours (or false negatives of theirs);
* ``audit/ours_fail_theirs_pass`` -- possible false negatives of ours;
* ``audit/disagree_rate`` -- both counts over the audited completions that both could score.

Each disagreement is a row of ``audit.jsonl`` in the run folder (the completion, what each
verifier extracted, both scores) for a person to read: the audit does not say which one is right.

Second verifiers: for math, ``math_verify`` (Hugging Face's Math-Verify, the ``compare`` extra)
or our own ``math`` with the other extraction strictness (``options: {strict: true}``: only
explicit answer markers count); for code, ``code`` with other options (``partial_credit``, a
different ``extract`` mode). "Pass" is a score of 1 (full credit).

Second verifier for code: ``code`` with ``options: {harness: exec}`` (program and tests in one
process, verdict by exit status: :mod:`rewards.code.exec_mode`) against the trusted harness.

Cost, off the critical path: :meth:`VerifierAudit.submit` sends the sample to the reward worker
pool from a background thread and returns at once (``asynchronous``, the default); the step goes on
(advantages, the policy update) while the workers score, and the report is collected when the
step's metrics are (:meth:`PendingAudit.report`). ``audit/seconds`` is the second verifier's time,
``audit/wait_seconds`` the part of it the step still waited for. The pool runs one batch at a
time: a scoring call made while the audit's batch runs waits for it.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewards.batch import score_batch
from rewards.pool import WorkerPool
from rewards.registry import get_verifier
from rewards.specs import AuditConfig
from rewards.types import VerifierResult

METRICS = ("audit/disagree_rate", "audit/ours_pass_theirs_fail", "audit/ours_fail_theirs_pass", "audit/samples",
           "audit/unscorable", "audit/seconds", "audit/wait_seconds")


def audit_sample(n: int, fraction: float, seed: int, step_seed: int) -> list[int]:
    """Indices of the completions to audit: ``max(1, round(fraction * n))`` of ``range(n)``, sorted.

    Seeded by ``(seed, step_seed)`` only, so a rerun of the step audits the same completions.
    """
    if n == 0 or fraction <= 0:
        return []
    k = min(n, max(1, round(fraction * n)))
    return sorted(random.Random(f"audit:{seed}:{step_seed}").sample(range(n), k))


def passes(result: VerifierResult) -> bool | None:
    """Full credit (score 1), no credit, or None when the verifier could not score."""
    return None if result.score is None else result.score >= 1.0 - 1e-9


@dataclass
class AuditReport:
    """One step's audit: its metrics and the disagreements (rows of ``audit.jsonl``)."""

    metrics: dict[str, float]
    rows: list[dict[str, Any]]


def compare(indices: Sequence[int], completions: Sequence[str], ours: Sequence[VerifierResult],
            theirs: Sequence[VerifierResult], verifier: str) -> AuditReport:
    """Compare ``ours[indices[j]]`` with ``theirs[j]`` for every audited completion."""
    both = ours_only = theirs_only = unscorable = 0
    rows = []
    for j, i in enumerate(indices):
        a, b = passes(ours[i]), passes(theirs[j])
        if a is None or b is None:
            unscorable += 1
            continue
        both += 1
        if a == b:
            continue
        ours_only += a
        theirs_only += b
        rows.append({
            "index": i, "completion": completions[i],
            "verdict": "ours_pass_theirs_fail" if a else "ours_fail_theirs_pass",
            "ours": {"score": ours[i].score, "extracted": ours[i].info.get("extracted")},
            "theirs": {"verifier": verifier, "score": theirs[j].score, "extracted": theirs[j].info.get("extracted")},
        })
    metrics = {
        "audit/samples": len(indices),
        "audit/unscorable": unscorable,
        "audit/ours_pass_theirs_fail": ours_only,
        "audit/ours_fail_theirs_pass": theirs_only,
        "audit/disagree_rate": (ours_only + theirs_only) / both if both else math.nan,
    }
    return AuditReport(metrics, rows)


class VerifierAudit:
    """The second verifier of ``cfg``, applied to a seeded sample of a step's scored completions."""

    def __init__(self, cfg: AuditConfig) -> None:
        if cfg.verifier is None:
            raise ValueError("task.audit.verifier is null: there is no second verifier to audit with")
        if not 0.0 <= cfg.fraction <= 1.0:
            raise ValueError(f"task.audit.fraction must be in [0, 1], got {cfg.fraction}")
        self.cfg = cfg
        self.verifier = get_verifier(cfg.verifier, **cfg.options)

    def run(self, completions: Sequence[str], references: Sequence[Any], fields: Sequence[Mapping[str, Any]],
            ours: Sequence[VerifierResult], step_seed: int, *, timeout: float = 10.0,
            pool: WorkerPool | None = None) -> AuditReport:
        indices = audit_sample(len(completions), self.cfg.fraction, self.cfg.seed, step_seed)
        if not indices:
            return AuditReport({}, [])
        batch = score_batch(self.verifier, [completions[i] for i in indices], [references[i] for i in indices],
                            [fields[i] for i in indices], timeout=timeout, pool=pool)
        report = compare(indices, completions, ours, batch.results, self.cfg.verifier)
        report.metrics["audit/seconds"] = batch.seconds
        return report

    def submit(self, completions: Sequence[str], references: Sequence[Any], fields: Sequence[Mapping[str, Any]],
               ours: Sequence[VerifierResult], step_seed: int, *, timeout: float = 10.0,
               pool: WorkerPool | None = None,
               on_done: Callable[[AuditReport], None] | None = None) -> PendingAudit:
        """:meth:`run` in a background thread (``cfg.asynchronous``), then ``on_done(report)`` there.

        Runs at once in this thread when ``cfg.asynchronous`` is false or the pool runs calls
        in-process (``WorkerPool(0)``: no worker processes to overlap with, and verifiers that
        time themselves out with signals need the main thread). The arguments are copied first:
        the caller may change its lists while the audit runs.
        """
        args = (list(completions), list(references), [dict(f) for f in fields], list(ours))

        def run() -> AuditReport:
            report = self.run(*args, step_seed, timeout=timeout, pool=pool)
            if on_done is not None:
                on_done(report)
            return report

        in_process = pool is not None and pool.num_workers == 0
        return PendingAudit(run, asynchronous=self.cfg.asynchronous and not in_process)


class PendingAudit:
    """A step's audit, scored in a background thread; :meth:`report` waits for it.

    ``metrics`` and ``rows`` wait too, so a pending audit reads like an :class:`AuditReport`.
    An exception in the audit is raised again by :meth:`report` (never a silent empty audit).
    """

    def __init__(self, run: Callable[[], AuditReport], asynchronous: bool = True) -> None:
        self._report: AuditReport | None = None
        self._error: BaseException | None = None
        self._waited = False
        self._thread: threading.Thread | None = None
        self._blocked = 0.0  # seconds the caller already waited (all of it when not asynchronous)
        if asynchronous:
            self._thread = threading.Thread(target=self._run, args=(run,), name="verifier-audit", daemon=True)
            self._thread.start()
        else:
            start = time.perf_counter()
            self._run(run)
            self._blocked = time.perf_counter() - start

    def _run(self, run: Callable[[], AuditReport]) -> None:
        try:
            self._report = run()
        except BaseException as exc:  # handed to the caller of report()
            self._error = exc

    def report(self) -> AuditReport:
        """The audit's report, once it is done; the first call records ``audit/wait_seconds`` (the
        seconds the caller waited for it, here and, when not asynchronous, in the constructor)."""
        start = time.perf_counter()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._report is not None
        if not self._waited:
            self._waited = True
            if self._report.metrics:
                self._report.metrics["audit/wait_seconds"] = self._blocked + time.perf_counter() - start
        return self._report

    @property
    def metrics(self) -> dict[str, float]:
        return self.report().metrics

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.report().rows


def merge(reports: Sequence[AuditReport | PendingAudit]) -> AuditReport:
    """Several sampling rounds of one step (dynamic sampling) as one report: counts and seconds
    add up, the rate is recomputed over all audited completions both verifiers scored."""
    reports = [r for r in reports if r.metrics]
    if not reports:
        return AuditReport({}, [])
    total = {k: sum(r.metrics.get(k, 0.0) for r in reports) for k in METRICS if k != "audit/disagree_rate"}
    both = total["audit/samples"] - total["audit/unscorable"]
    disagree = total["audit/ours_pass_theirs_fail"] + total["audit/ours_fail_theirs_pass"]
    total["audit/disagree_rate"] = disagree / both if both else math.nan
    return AuditReport(total, [row for r in reports for row in r.rows])
