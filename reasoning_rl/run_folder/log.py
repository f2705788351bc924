"""The run's metrics log as the trainer holds it: ``metrics.jsonl`` (and TensorBoard) with the sinks
the config asks for attached: the trackers of ``trainer.loggers`` (reasoning_rl.trackers), then the
health monitor (``trainer.health``, reasoning_rl.health), whose events also go to the trackers.
The trainer calls :func:`open_run_log` once and ``log`` every step; it never learns which sinks run."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from reasoning_rl.health.monitor import HealthSink
from reasoning_rl.health.preflight import run_preflight, should_run
from reasoning_rl.run_folder.metrics_log import MetricsLogger, MetricsSink, read_metrics
from reasoning_rl.trackers.registry import open_trackers


def open_run_log(cfg: Any, run_dir: Path, resume_step: int | None, enabled: bool, ctx: Any = None) -> MetricsLogger:
    """The logger of a run (``cfg``: its TrainConfig). ``resume_step``: metrics after it are dropped
    and the sinks continue from those kept; ``enabled=False`` (ranks other than 0) writes nothing, but
    runs the health rules of ``trainer.health.stop_on`` silently on the same global metrics, so that every
    rank stops at the step rank 0 stops (instead of waiting for it in the next collective).
    ``ctx`` (the algorithm's RunContext): a fresh run's first batch is read by the preflight
    (reasoning_rl.health.preflight) before any update."""
    tensorboard = cfg.trainer.tensorboard and "tensorboard" in cfg.trainer.loggers
    logger = MetricsLogger(run_dir, tensorboard=tensorboard, resume_step=resume_step, enabled=enabled)
    if not enabled:
        if cfg.trainer.health.enabled and cfg.trainer.health.stop_on:
            logger.add_sinks([health_sink(cfg, Path(run_dir), resume_step, write=False)])
        return logger
    trackers = open_trackers(cfg.trainer.loggers, cfg.trainer.tracking, Path(run_dir), asdict(cfg),
                             resume=bool(resume_step), group=sweep_group())
    sinks: list[MetricsSink] = list(trackers)
    if cfg.trainer.health.enabled:
        health = health_sink(cfg, Path(run_dir), resume_step, write=True)
        health.listeners += [t.health for t in trackers]
        sinks.append(health)
        if should_run(cfg, ctx, resume_step):
            run_preflight(ctx, cfg, Path(run_dir))
    logger.add_sinks(sinks)
    return logger


def health_sink(cfg: Any, run_dir: Path, resume_step: int | None, write: bool) -> HealthSink:
    """The health monitor of a run, its windows refilled from the steps a resumed run keeps (those up to
    ``resume_step``: on ranks other than 0 the file may still hold later ones, which rank 0 is dropping)."""
    earlier = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["step"] <= resume_step] if resume_step else []
    return HealthSink(cfg.trainer.health, run_dir, resume_step, earlier, write=write)


def sweep_group() -> str | None:
    """The sweep folder of a ``--multirun`` job (its runs form one W&B group / MLflow parent run); None otherwise."""
    from reasoning_rl.entry_points import is_multirun

    if not is_multirun():
        return None
    from hydra.core.hydra_config import HydraConfig

    return str(HydraConfig.get().sweep.dir)
