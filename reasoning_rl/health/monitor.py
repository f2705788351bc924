"""The health monitor: reads each step's metrics through the rules (reasoning_rl.health.rules)
and says when one fires and when it clears.

Where a warning goes: one ``WARNING`` log line when a rule fires and one ``INFO`` line when it
clears; a row per event in ``health.jsonl`` in the run folder; the open warnings in
``status.json`` (``"health": [...]``). A rule named in ``trainer.health.stop_on`` raises
:class:`HealthStop` (a user error: the CLI records ``failed`` with ``cause: health:<rule>`` and
exits with code 2) after the step's metrics were written, so ``metrics.jsonl`` holds the step
that stopped it.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.health.rules import RULES, TESTS, Rule, read_value, with_thresholds
from reasoning_rl.settings.trainer import HealthConfig

log = logging.getLogger("reasoning_rl.health")

HEALTH_FILE = "health.jsonl"


class HealthStop(UserError):
    """A rule of ``trainer.health.stop_on`` fired; ``cause`` is ``health:<rule>``. Every rank of a
    data-parallel run raises it at the same step (reasoning_rl.run_folder.log)."""

    raised_by_every_rank = True

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.cause = f"health:{rule}"


@dataclass(frozen=True)
class Event:
    """A rule firing or clearing at a step: one row of health.jsonl."""

    step: int
    rule: str
    event: str
    """fired or cleared"""
    value: float | None
    """What the test measured (a mean, a ratio or the last value); None when it clears."""
    threshold: float
    window: int
    keys: tuple[str, ...]
    advice: str
    doc: str

    def row(self) -> dict[str, Any]:
        value = self.value if self.value is None or math.isfinite(self.value) else str(self.value)
        return {"step": self.step, "rule": self.rule, "event": self.event, "value": value,
                "threshold": self.threshold, "window": self.window, "keys": list(self.keys),
                "advice": self.advice, "doc": self.doc}

    def line(self) -> str:
        if self.event == "cleared":
            return f"health: {self.rule} cleared at step {self.step}"
        return (f"health: {self.rule} at step {self.step} ({'+'.join(self.keys)}: {self.value:.4g}, threshold "
                f"{self.threshold:g} over {self.window} steps): {self.advice} [{self.doc}]")


class HealthMonitor:
    """Feeds each step's metrics to the rules; returns the events and keeps the open warnings."""

    def __init__(self, rules: Iterable[Rule] = RULES) -> None:
        self.rules = tuple(rules)
        self.history: dict[str, list[float]] = {r.name: [] for r in self.rules}
        self.open: dict[str, Event] = {}
        self._counters: dict[str, float] = {}

    @classmethod
    def from_config(cls, cfg: HealthConfig) -> HealthMonitor:
        return cls(r for r in with_thresholds(cfg.thresholds) if r.name not in cfg.disable)

    def observe(self, step: int, metrics: Mapping[str, Any]) -> list[Event]:
        """The rules' events at ``step`` (fired or cleared), in the table's order."""
        events = []
        excused = {r.unless_rises for r in self.rules if r.unless_rises and self._rose(r.unless_rises, metrics)}
        for rule in self.rules:
            value = read_value(rule, metrics)
            if value is None or rule.unless_rises in excused:
                continue
            history = self.history[rule.name]
            history.append(value)
            measured = TESTS[rule.test](history, rule.threshold, rule.window)
            if measured is not None and rule.name not in self.open:
                event = Event(step, rule.name, "fired", measured, rule.threshold, rule.window, rule.keys,
                              rule.advice, rule.doc)
                self.open[rule.name] = event
                events.append(event)
            elif measured is None and rule.name in self.open:
                del self.open[rule.name]
                events.append(Event(step, rule.name, "cleared", None, rule.threshold, rule.window, rule.keys,
                                    rule.advice, rule.doc))
        return events

    def _rose(self, key: str, metrics: Mapping[str, Any]) -> bool:
        value = metrics.get(key)
        if not isinstance(value, (int, float)):
            return False
        before = self._counters.get(key, 0.0)
        self._counters[key] = float(value)
        return value > before

    def open_warnings(self) -> list[dict[str, Any]]:
        """The rules firing now, for status.json: rule, since (step), value, advice, doc."""
        return [{"rule": e.rule, "since": e.step, "value": e.row()["value"], "advice": e.advice, "doc": e.doc}
                for e in self.open.values()]


def replay(rows: Iterable[Mapping[str, Any]], monitor: HealthMonitor | None = None) -> list[Event]:
    """Every event the rules raise over a run's metrics (metrics.jsonl's rows, in step order)."""
    monitor = monitor or HealthMonitor()
    return [event for row in rows for event in monitor.observe(int(row["step"]), row)]


class HealthSink:
    """The monitor of a run: a metrics sink (``MetricsLogger``'s ``sinks``) that writes health.jsonl,
    logs, keeps status.json's ``health`` up to date and raises :class:`HealthStop`.

    On resume, the metrics kept in metrics.jsonl are replayed silently, so the windows and the open
    warnings continue where the run stopped; health.jsonl keeps the rows up to the resumed step.

    ``write=False`` (the data-parallel ranks other than 0, which see the same global metrics): no file,
    no log line, no listener; only :class:`HealthStop`, at the same step as rank 0's."""

    def __init__(self, cfg: HealthConfig, run_dir: Path, resume_step: int | None = None,
                 earlier: Iterable[Mapping[str, Any]] = (), write: bool = True) -> None:
        self.cfg = cfg
        self.write = write
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / HEALTH_FILE
        self.monitor = HealthMonitor.from_config(cfg)
        self.listeners: list[Callable[[int, list[dict[str, Any]]], None]] = []
        """Called with each step's event rows (the trackers: reasoning_rl.run_folder.log)."""
        for row in earlier:
            self.monitor.observe(int(row["step"]), row)
        if write:
            # An empty health.jsonl and "health": [] in status.json say the rules ran and nothing fired.
            _keep_rows_up_to(self.path, resume_step or 0)
            _record_open(self.run_dir, self.monitor.open_warnings())

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        events = self.monitor.observe(step, metrics)
        if events and self.write:
            self._record(step, events)
        stops = [e for e in events if e.event == "fired" and e.rule in self.cfg.stop_on]
        if stops:
            raise HealthStop(f"stopped by trainer.health.stop_on: {stops[0].line()} (metrics.jsonl holds step "
                             f"{step}; drop the rule from trainer.health.stop_on to let the run go on)", stops[0].rule)

    def _record(self, step: int, events: list[Event]) -> None:
        with self.path.open("a") as f:
            for event in events:
                f.write(json.dumps(event.row()) + "\n")
        for event in events:
            (log.warning if event.event == "fired" else log.info)(event.line())
        for listener in self.listeners:
            listener(step, [e.row() for e in events])
        _record_open(self.run_dir, self.monitor.open_warnings())

    def close(self) -> None:
        pass


def _record_open(run_dir: Path, warnings: list[dict[str, Any]]) -> None:
    from reasoning_rl.run_folder.status import update_status

    update_status(run_dir, health=warnings)


def _keep_rows_up_to(path: Path, step: int) -> None:
    """health.jsonl with the rows up to ``step`` (none on a fresh start), created when missing."""
    from reasoning_rl.run_folder.atomic import atomic_write_text

    text = path.read_text() if path.exists() else ""
    kept = [line for line in text.splitlines() if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))
