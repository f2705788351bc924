"""``trainer.loggers``: the trackers a run writes to, by name. Adding one is one class and one row of
:data:`TRACKERS`; the trainer never learns their names (reasoning_rl.run_folder.log attaches them as metrics sinks).

A tracker run's id is kept in the run folder's ``trackers.json``, so a resumed run continues it. Its
failures after the start warn once and never stop the run (:class:`~reasoning_rl.trackers.base.Guarded`);
an unknown name, a missing package (named with its extra) or an MLflow server that does not answer
stop the command before the first step, in one line with exit code 2."""

from __future__ import annotations

import difflib
import importlib.util
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.settings.trainer import TrackingConfig
from reasoning_rl.trackers.base import Guarded, Tracker

log = logging.getLogger("reasoning_rl.trackers")

IDS_FILE = "trackers.json"

ARTIFACTS = ("config.yaml", "summary.json", "reward_curve.png", "eval_table.md", "eval_before.json",
             "eval_after.json", "health.jsonl", "status.json")
"""Run-folder files each tracker receives when the run ends (those that exist)."""


def _open_wandb(*args: Any) -> Tracker:
    from reasoning_rl.trackers.wandb_tracker import WandbTracker

    return WandbTracker(*args)


def _open_mlflow(*args: Any) -> Tracker:
    from reasoning_rl.trackers.mlflow_tracker import MlflowTracker

    return MlflowTracker(*args)


@dataclass(frozen=True)
class TrackerEntry:
    name: str
    package: str
    """The module its ``import`` needs."""
    extra: str
    """``pip install "reasoning-rl[<extra>]"`` installs it."""
    open: Callable[..., Tracker] | None
    """(run_dir, TrackingConfig, resolved config, run id or None, sweep group or None) -> Tracker; None for
    TensorBoard, which MetricsLogger writes itself."""


TRACKERS: dict[str, TrackerEntry] = {
    "tensorboard": TrackerEntry("tensorboard", "torch.utils.tensorboard", "tensorboard", None),
    "wandb": TrackerEntry("wandb", "wandb", "wandb", _open_wandb),
    "mlflow": TrackerEntry("mlflow", "mlflow", "mlflow", _open_mlflow),
}


def logger_problems(names: Sequence[str], tracking: TrackingConfig | None = None) -> list[str]:
    """Unknown names (with the known ones) and missing packages (with the extra) of ``trainer.loggers``;
    with ``tracking``, an MLflow server that does not answer (checked before the run writes anything)."""
    out = []
    for name in names:
        entry = TRACKERS.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, list(TRACKERS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            out.append(f"trainer.loggers: unknown logger {name!r}{hint}; the loggers are {', '.join(TRACKERS)}")
        elif entry.open is not None and importlib.util.find_spec(entry.package) is None:
            out.append(f"trainer.loggers=[{name}] needs the {entry.package} package: pip install "
                       f"\"reasoning-rl[{entry.extra}]\" (or pip install -e \".[{entry.extra}]\")")
        elif name == "mlflow" and tracking is not None:
            from reasoning_rl.trackers.mlflow_tracker import check_reachable, tracking_uri

            try:
                check_reachable(tracking_uri(tracking))
            except UserError as exc:
                out.append(str(exc))
    return out


_OPEN: dict[Path, list[Guarded]] = {}
"""The tracker runs of each run folder this process trains, until :func:`finish_trackers`."""


def open_trackers(names: Sequence[str], cfg: TrackingConfig, run_dir: Path, config: Mapping[str, Any],
                  resume: bool, group: str | None) -> list[Guarded]:
    """Start (or, on resume, continue) a tracker run for each name; their ids go to trackers.json."""
    run_dir = Path(run_dir)
    ids_path = run_dir / IDS_FILE
    ids = json.loads(ids_path.read_text()) if resume and ids_path.exists() else {}
    out = []
    for name in names:
        entry = TRACKERS[name]
        if entry.open is None:
            continue
        try:
            tracker = entry.open(run_dir, cfg, config, ids.get(name), group)
        except UserError:  # bad input found at start (an MLflow server that does not answer): one line, exit 2
            raise
        except Exception as exc:  # any other failure to start: warned once, the run goes on without it
            log.warning("tracker %s could not start (%s: %s); the run goes on without it (metrics.jsonl is "
                        "complete)", name, type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "")
            continue
        ids[name] = tracker.run_id
        out.append(Guarded(name, tracker))
    if out:
        from reasoning_rl.run_folder.atomic import atomic_write_text

        atomic_write_text(ids_path, json.dumps(ids, indent=2))
        _OPEN[run_dir.resolve()] = out
    return out


def finish_trackers(run_dir: Path, status: str) -> None:
    """Send the run folder's files (:data:`ARTIFACTS`) to the run's trackers and end their runs with
    ``status``; nothing when none is open. Never raises."""
    for tracker in _OPEN.pop(Path(run_dir).resolve(), []):
        tracker.artifacts([Path(run_dir) / name for name in ARTIFACTS])
        tracker.finish(status)
