"""Health rules: the known silent failures of an RL run, read off its metrics every step
(``rules``: the table; ``monitor``: fires and clears them, health.jsonl, status.json, stop_on;
``python -m reasoning_rl.health RUN_DIR`` replays a finished run's metrics.jsonl). docs/health.md."""

from reasoning_rl.health.monitor import Event, HealthMonitor, HealthSink, HealthStop, replay
from reasoning_rl.health.rules import RULE_NAMES, RULES, Rule

__all__ = ["RULES", "RULE_NAMES", "Event", "HealthMonitor", "HealthSink", "HealthStop", "Rule",
           "replay"]
