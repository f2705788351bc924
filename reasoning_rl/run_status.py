"""``status.json`` of a run folder: running, finished or failed, so sweeps can be resumed and
reported without guessing.

    {"status": "finished", "started": "...", "ended": "...", "wall_s": 412.3, "steps": 600, ...}

The CLI writes ``running`` before training, then ``finished`` (with the summary's headline
numbers) or ``failed`` (with the error and its traceback). A folder whose status says
``running`` but whose process is gone was killed: the report calls it incomplete, and
re-launching the sweep resumes it from its newest checkpoint.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from reasoning_rl.atomic import atomic_write_text

STATUS_FILE = "status.json"
IGNORED_KEYS = ("trainer.resume", "trainer.output_dir", "trainer.progress_bar")
"""Settings that may differ between a run and its relaunch (they do not change its result)."""


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
    record = {"status": status, "started": previous.get("started", now) if status != "running" else now,
              "updated": now, "host": socket.gethostname(), "pid": os.getpid(), **fields}
    atomic_write_text(Path(run_dir) / STATUS_FILE, json.dumps(record, indent=2, default=str))
    return record


def failure_fields(exc: BaseException) -> dict[str, str]:
    return {"error": f"{type(exc).__name__}: {exc}",
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
