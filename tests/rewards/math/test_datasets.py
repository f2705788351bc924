"""Whole datasets: MATH-500 reference solutions and Math-Verify's own regression cases."""

from __future__ import annotations

import json
from pathlib import Path

from rewards.math import MathVerifier, verify


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_math500_reference_solutions_match_their_answers(shared_data_dir: Path) -> None:
    rows = _rows(shared_data_dir / "math500.jsonl")
    assert len(rows) == 500
    verifier = MathVerifier()
    failures = []
    for row in rows:
        result = verifier(row["solution"], row["answer"])
        if result.score != 1.0:
            failures.append((row["unique_id"], row["answer"], result))
    assert failures == []


def test_mathverify_cases_no_false_positive(shared_data_dir: Path) -> None:
    rows = _rows(shared_data_dir / "math_equiv" / "mathverify_cases.jsonl")
    verdicts = [(row, verify(row["gold"], row["pred"])) for row in rows]
    false_positives = [row["source"] for row, g in verdicts if g.equal and not row["expected"]]
    agree = sum(g.equal == row["expected"] for row, g in verdicts)
    assert false_positives == []
    assert agree >= 256, f"{agree}/{len(rows)}"  # Math-Verify itself agrees on 251
    assert all(g.status == "ok" for _, g in verdicts)
