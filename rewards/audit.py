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

Cost: the sample goes through the same reward worker pool after the step's scoring (on the
critical path; ``audit/seconds`` measures it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewards.batch import score_batch
from rewards.pool import WorkerPool
from rewards.registry import get_verifier
from rewards.types import VerifierResult

METRICS = ("audit/disagree_rate", "audit/ours_pass_theirs_fail", "audit/ours_fail_theirs_pass", "audit/samples",
           "audit/unscorable", "audit/seconds")


@dataclass
class AuditConfig:
    """``task.audit``: re-score a sample of each step's completions with a second verifier."""

    verifier: str | None = None
    """Registered verifier that re-scores the sample (``math`` with ``options: {strict: true}``,
    ``math_verify``, ``code``); null: no audit."""
    fraction: float = 0.1
    """Share of each step's completions audited (at least one when > 0)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the second verifier (``rewards.get_verifier(verifier, **options)``)."""
    seed: int = 0
    """Seed of the sample (combined with the step's sampling seed)."""


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


def merge(reports: Sequence[AuditReport]) -> AuditReport:
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
