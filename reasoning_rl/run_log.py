"""The run's metrics log as the trainer holds it: ``metrics.jsonl`` (and TensorBoard) with the
sinks the config asks for attached: the health monitor (``trainer.health``, reasoning_rl.health).
The trainer calls :func:`open_run_log` once and ``log`` every step; it never learns which sinks run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reasoning_rl.health.monitor import HealthSink
from reasoning_rl.metrics_log import MetricsLogger, MetricsSink, read_metrics


def open_run_log(cfg: Any, run_dir: Path, resume_step: int | None, enabled: bool) -> MetricsLogger:
    """The logger of a run (``cfg``: its TrainConfig). ``resume_step``: metrics after it are dropped
    and the sinks continue from those kept; ``enabled=False`` (ranks other than 0) writes nothing."""
    logger = MetricsLogger(run_dir, tensorboard=cfg.trainer.tensorboard, resume_step=resume_step, enabled=enabled)
    if not enabled:
        return logger
    sinks: list[MetricsSink] = []
    if cfg.trainer.health.enabled:
        earlier = read_metrics(logger.metrics_path) if resume_step else []
        sinks.append(HealthSink(cfg.trainer.health, Path(run_dir), resume_step, earlier))
    logger.add_sinks(sinks)
    return logger
