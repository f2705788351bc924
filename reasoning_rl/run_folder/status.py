"""``status.json`` of a run folder: running, finished or failed, so sweeps can be resumed and
reported without guessing.

    {"status": "finished", "started": "...", "ended": "...", "wall_s": 412.3, "steps": 600, ...}

Each record names the host and process, and the Slurm job when there is one (``slurm_job_id``).
The CLI writes ``running`` before training, then ``finished`` (with the summary's headline
numbers) or ``failed`` (with the error, its traceback and the ``stage`` it stopped in:
``validation`` for a sweep's run refused by its settings, ``setup`` for loading data and
model, ``training`` for warm start, evaluations, steps and checkpoints, ``finishing`` for the
summary files) and, when a rule of ``trainer.health.stop_on`` stopped it, the ``cause``
(``health:<rule>``). The health rules' open warnings are its ``health`` list (reasoning_rl.health),
kept when the run ends. A failure is recorded even on a full disk (:func:`record_failure`). A folder
whose status says ``running`` but whose process is gone was killed: the report calls it
incomplete, and re-launching the sweep resumes it from its newest checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from reasoning_rl.run_folder.atomic import atomic_write_text

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"

CARRIED_KEYS = ("health", "preflight")
"""Fields a record keeps from the previous one when the run ends (not when it starts again)."""

IGNORED_KEYS = ("trainer.resume", "trainer.output_dir", "trainer.progress_bar", "trainer.health", "trainer.loggers",
                "trainer.tracking", "trainer.tensorboard")
"""Settings that may differ between a run and its relaunch (they do not change its result: the health
rules and trackers only read the metrics; a folder written before they existed has none of them)."""


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / STATUS_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {"status": "unknown", "error": f"{path} is not valid JSON"}


def write_status(run_dir: str | Path, status: str, **fields: Any) -> dict[str, Any]:
    """Record ``status`` (keeping ``started`` from the previous record)."""
    previous = read_status(run_dir) or {}
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    carried = {k: previous[k] for k in CARRIED_KEYS if k in previous and status != "running"}
    record = {"status": status, "started": previous.get("started", now) if status != "running" else now,
              "updated": now, "host": socket.gethostname(), "pid": os.getpid(), **scheduler_fields(), **carried,
              **fields}
    atomic_write_text(Path(run_dir) / STATUS_FILE, json.dumps(record, indent=2, default=str))
    return record


def scheduler_fields() -> dict[str, str]:
    """The Slurm job this process runs in, as ``scancel`` and ``sacct`` name it (``<array id>_<task>``
    for a sweep's array job, else ``SLURM_JOB_ID``); nothing outside Slurm."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")
    return {"slurm_job_id": job} if job else {}


def update_status(run_dir: str | Path, **fields: Any) -> None:
    """Set ``fields`` in the folder's ``status.json``, keeping the rest; nothing when it has none
    (a run trained without the CLI)."""
    previous = read_status(run_dir)
    if previous is not None:
        atomic_write_text(Path(run_dir) / STATUS_FILE, json.dumps({**previous, **fields}, indent=2, default=str))


def record_failure(run_dir: str | Path, exc: BaseException, **fields: Any) -> bool:
    """Record ``failed`` with ``exc``'s message and traceback; never raises (False when nothing
    could be written), so the error that stopped the run is the one reported.

    On a full disk the atomic write needs a new file and fails; the existing ``status.json`` is
    then overwritten in place with a short record (no traceback), which reuses the blocks the
    file already holds."""
    try:
        write_status(run_dir, "failed", **fields, **failure_fields(exc))
        return True
    except OSError as first:
        path = Path(run_dir) / STATUS_FILE
        previous = read_status(run_dir) or {}
        short = {"status": "failed", "started": previous.get("started"), "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
                 "pid": os.getpid(), **scheduler_fields(), **fields, "error": failure_fields(exc)["error"][:1000],
                 "note": f"recorded in place: {first}"}
        try:
            with open(path, "r+", encoding="utf-8") as f:
                f.write(json.dumps(short, default=str))
                f.truncate()
            return True
        except OSError as again:
            log.warning("could not record the failure in %s: %s", path, again)
            return False


def failure_fields(exc: BaseException) -> dict[str, str]:
    cause = getattr(exc, "cause", None)  # HealthStop: health:<rule>
    return {**({"cause": cause} if isinstance(cause, str) else {}), "error": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}


def config_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs (``IGNORED_KEYS`` aside)."""
    out = []
    for key in sorted(set(old) | set(new)):
        dotted = f"{prefix}{key}"
        if dotted in IGNORED_KEYS:
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{dotted}.")
        elif a != b:
            out.append(dotted)
    return out
