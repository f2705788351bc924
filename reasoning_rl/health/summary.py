"""One cell per run for ``reasoning-rl-report``: what the health rules said about it (health.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from reasoning_rl.health.monitor import HEALTH_FILE


def health_summary(run_dir: str | Path) -> str | None:
    """``ok`` (the rules ran, nothing fired); else each rule that fired with its first step, ``(open)``
    when it had not cleared by the end, and the preflight's findings: ``truncation@16 (open), kl_runaway@300;
    preflight: zero_variance``. None for a run without health.jsonl (trained before the rules existed)."""
    path = Path(run_dir) / HEALTH_FILE
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    first: dict[str, int] = {}
    open_now: set[str] = set()
    for row in rows:
        if row["event"] == "fired":
            first.setdefault(row["rule"], row["step"])
            open_now.add(row["rule"])
        elif row["event"] == "cleared":
            open_now.discard(row["rule"])
    parts = [", ".join(f"{rule}@{step}" + (" (open)" if rule in open_now else "") for rule, step in first.items())]
    preflight = [row["rule"] for row in rows if row["event"] == "preflight"]
    if preflight:
        parts.append("preflight: " + ", ".join(preflight))
    return "; ".join(p for p in parts if p) or "ok"
