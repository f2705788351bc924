"""Experiment trackers (``trainer.loggers=[tensorboard, wandb, mlflow]``): docs/trackers.md."""

from reasoning_rl.settings.trainer import TrackingConfig
from reasoning_rl.trackers.base import Guarded, Tracker
from reasoning_rl.trackers.registry import TRACKERS, finish_trackers, logger_problems, open_trackers

__all__ = ["TRACKERS", "Guarded", "Tracker", "TrackingConfig", "finish_trackers", "logger_problems", "open_trackers"]
