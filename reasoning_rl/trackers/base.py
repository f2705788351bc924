"""What an experiment tracker does for a run, and the guard that keeps a failing one from stopping it."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("reasoning_rl.trackers")


class Tracker(Protocol):
    """One tracker run for one training run (reasoning_rl.trackers.registry opens them)."""

    run_id: str
    """Kept in the run folder's trackers.json, so a resumed run continues the same tracker run."""

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def log_health(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def log_artifacts(self, paths: Sequence[Path]) -> None: ...

    def finish(self, status: str) -> None: ...


class Guarded:
    """A tracker whose failures (a server down, a full disk) are logged once, then ignored: the run and
    metrics.jsonl go on without it. A metrics sink (``MetricsLogger.sinks``)."""

    def __init__(self, name: str, tracker: Tracker) -> None:
        self.name = name
        self.tracker = tracker
        self.failed: str | None = None

    def _call(self, what: str, fn: Any, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            fn(*args)
        except Exception as exc:  # a tracker must never stop training: reported once, then left off
            self.failed = f"{type(exc).__name__}: {exc}"
            log.warning("tracker %s failed (%s: %s); the run goes on without it (metrics.jsonl is complete)",
                        self.name, what, self.failed.splitlines()[0][:300])

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        scalars = {k: float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        self._call("log", self.tracker.log_metrics, step, scalars)

    def health(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        self._call("health", self.tracker.log_health, step, rows)

    def artifacts(self, paths: Sequence[Path]) -> None:
        self._call("artifacts", self.tracker.log_artifacts, [p for p in paths if Path(p).is_file()])

    def finish(self, status: str) -> None:
        self._call("finish", self.tracker.finish, status)

    def close(self) -> None:
        """The metrics stream ended; the tracker run stays open for the artifacts (:func:`finish_trackers`)."""
