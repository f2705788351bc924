"""The metric keys docs/metrics.md documents, read from its tables, for tests that check every
key a run logs is documented (a hand-kept list in a test drifts from what the trainer logs)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
NOT_METRICS = {"step"}
"""Keys of a metrics.jsonl line that are not metrics."""


def documented_keys(doc: Path = METRICS_DOC) -> dict[str, str]:
    """Each key in the first column of the doc's tables -> its description (the second column)."""
    out = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            keys, meaning = line.strip("| ").split(" | ")[:2]
            out.update(dict.fromkeys(re.findall(r"`([^`]+)`", keys), meaning))
    return out


def documented_patterns(doc: Path = METRICS_DOC) -> list[re.Pattern[str]]:
    """One pattern per documented key: `reward/<component>` stands for any component name,
    `eval/pass@K` for any K."""
    patterns = []
    for key in documented_keys(doc):
        regex = re.sub(r"<[^>]+>", "[A-Za-z0-9_]+", re.escape(key).replace(r"\<", "<").replace(r"\>", ">"))
        patterns.append(re.compile(regex.replace("@K", r"@\d+")))
    return patterns


def documented_for(algorithm: str, doc: Path = METRICS_DOC) -> set[str]:
    """The keys whose description starts with ``<algorithm>:`` (``PPO: the clipped value loss``)."""
    return {k for k, meaning in documented_keys(doc).items() if meaning.startswith(f"{algorithm}:")}


def undocumented(keys: Iterable[str], doc: Path = METRICS_DOC) -> list[str]:
    """The keys of ``keys`` that no entry of docs/metrics.md describes, sorted."""
    patterns = documented_patterns(doc)
    return sorted(k for k in set(keys) - NOT_METRICS if not any(p.fullmatch(k) for p in patterns))
