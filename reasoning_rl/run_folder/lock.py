"""One run per run folder, and what a new command does with a folder that already holds one.

Lock. ``reasoning-rl-train`` holds an exclusive ``flock`` on ``<run folder>/.run.lock`` from before it
reads the folder until it exits, with its pid (and host) written into the file. A second process on the
same folder is refused in one line naming that pid (:class:`RunFolderBusy`, exit code 2) instead of
logging every step twice into the same ``metrics.jsonl``. The kernel releases the lock when the holder
exits however it ends (``kill -9`` included), so a stale ``.run.lock`` never blocks the next command;
the file itself stays (removing it would let two processes lock two different files of that name).

Existing runs. A folder holding an incomplete run with the same settings resumes it by default
(``trainer.resume=null``), as a relaunched sweep does; a killed run's command run again never starts
from step 1 over its checkpoints and logs. Starting over takes ``trainer.resume=false`` (or another
folder), and even then the earlier files are moved aside, not overwritten (:func:`prepare_run_folder`,
:func:`set_aside`; docs/sweeps.md).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from reasoning_rl.config_renames import upgrade_saved_config
from reasoning_rl.errors import UserError
from reasoning_rl.run_folder.checkpoint import latest_checkpoint
from reasoning_rl.run_folder.status import config_differences, read_status

if TYPE_CHECKING:
    from reasoning_rl.config import TrainConfig

log = logging.getLogger(__name__)

LOCK_FILE = ".run.lock"
REPLACED = ".replaced"
"""Where :func:`set_aside` keeps the files of a run that a new one replaced (``trainer.resume=false``)."""


class RunFolderBusy(UserError, RuntimeError):
    """Another process is running in this run folder (it holds ``.run.lock``)."""


class RunFolderConflict(UserError, RuntimeError):
    """The run folder holds another run (other settings): training there would mix the two."""


class RunFolderLock:
    """The exclusive lock of one run folder, held from :meth:`acquire` to :meth:`release` (or process exit)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunFolderLock:
        """Take the lock, or raise :class:`RunFolderBusy` naming the process that holds it. A file system
        without ``flock`` (some network mounts) is run on unlocked, with a warning."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by subprocesses (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderBusy(
                    f"{self.run_dir} is in use by another run ({holder or 'pid not yet written'}): one run per "
                    "folder; wait for it to end (or stop it), or choose another trainer.output_dir") from None
            log.warning("cannot lock %s (%s): nothing stops a second run from writing into this folder at once",
                        self.path, exc)
            return self
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def __enter__(self) -> RunFolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def prepare_run_folder(run_dir: Path, resolved: dict, train_cfg: TrainConfig) -> bool:
    """Decide what to do with an existing run folder (reading it only); True when its run is already
    finished (it is skipped). ``trainer.resume`` is set to what the run does:

    ===================================  =========================================================
    the folder holds                      the run
    ===================================  =========================================================
    nothing (or a run that failed         starts (trainer.resume=true with no checkpoint: a warning)
    before its first step, no checkpoint)
    a finished run, same settings         is skipped
    an incomplete run, same settings      resumes from its newest checkpoint (null, the default, says
                                          so in one line; true); with no checkpoint, or with
                                          trainer.resume=false, starts over: :func:`set_aside`
                                          first moves the earlier files to ``.replaced/<time>/``
    a run with other settings             is refused (:class:`RunFolderConflict`), unless
                                          trainer.resume=false: starts over, as above
    ===================================  =========================================================

    A run that failed before training began (bad settings, missing data) holds nothing to mix with
    (:func:`holds_a_run`), so the corrected command may use its folder."""
    old_config = run_dir / "config.yaml"
    status = read_status(run_dir)
    held = holds_a_run(run_dir, status)
    resume = train_cfg.trainer.resume
    if held and old_config.exists() and resume is not False:
        # a folder written before the algo settings were grouped names them by their old keys
        saved = upgrade_saved_config(yaml.safe_load(old_config.read_text()) or {}, train_cfg.algo)
        differ = config_differences(saved, resolved)
        if differ:
            raise RunFolderConflict(
                f"{run_dir} already holds a run with other settings (they differ at {', '.join(differ[:6])}): "
                f"choose another trainer.output_dir (or hydra.sweep.dir), or start over there with "
                f"trainer.resume=false (the earlier run's files are moved to {run_dir / REPLACED}/<time>/)")
    if status is not None and status.get("status") == "finished":
        return True
    checkpoint = latest_checkpoint(run_dir) if held else None
    if resume is None:
        train_cfg.trainer.resume = checkpoint is not None
        if checkpoint is not None:
            log.info("%s holds an incomplete run with the same settings: resuming it from %s (trainer.resume=false "
                     "starts it over instead, keeping its files in %s/<time>/)", run_dir, checkpoint.name,
                     run_dir / REPLACED)
    elif resume and held and checkpoint is None:
        log.warning("trainer.resume=true but %s holds no checkpoint to resume from: starting over", run_dir)
        train_cfg.trainer.resume = False  # so the earlier attempt's files are set aside, not overwritten
    return False


def set_aside(run_dir: Path) -> Path | None:
    """Before a run starts over in ``run_dir``: move the files of the run it holds (:func:`holds_a_run`)
    to ``run_dir/.replaced/<time>/`` and say so; None when it holds none. Left in place: the lock,
    earlier ``.replaced`` runs, and Hydra's ``.hydra/`` and ``*.log`` of this very command (a sweep's
    run folder is its Hydra output folder)."""
    status = read_status(run_dir)
    if not holds_a_run(run_dir, status):
        return None
    dest = run_dir / REPLACED / time.strftime("%Y-%m-%d_%H-%M-%S")
    while dest.exists():
        dest = dest.with_name(dest.name + "+")
    dest.mkdir(parents=True)
    moved = [p for p in sorted(run_dir.iterdir())
             if p.name not in (LOCK_FILE, REPLACED, ".hydra") and not p.name.endswith(".log")]
    for path in moved:
        path.rename(dest / path.name)
    steps = len((dest / "metrics.jsonl").read_text().splitlines()) if (dest / "metrics.jsonl").exists() else 0
    log.warning("%s held an earlier run (%s, %d logged steps): starting over; its files (%s) are moved to %s",
                run_dir, (status or {}).get("status", "no status"), steps, ", ".join(p.name for p in moved), dest)
    return dest


def holds_a_run(run_dir: Path, status: dict | None) -> bool:
    """Whether ``run_dir`` holds a run another one must not mix with: a checkpoint, a run that is
    running or finished, or a failed one that logged a training step (``metrics.jsonl``, which a
    new run would append to). A run that failed before its first step (refused settings, missing
    data or solutions, a full disk at the start) leaves nothing to mix with."""
    if latest_checkpoint(run_dir) is not None:
        return True
    if status is None:
        return False
    metrics = run_dir / "metrics.jsonl"
    return status.get("status") != "failed" or (metrics.exists() and metrics.stat().st_size > 0)
