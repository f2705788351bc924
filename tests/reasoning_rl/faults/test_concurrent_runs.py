"""One run per folder (reasoning_rl.run_folder.lock): a second process on a folder in use is refused in one
line naming the pid that holds it; a run killed with -9 leaves no lock behind."""

import json
import os
import signal
import subprocess
import time

import pytest

from reasoning_rl.run_folder.lock import LOCK_FILE, RunFolderBusy, RunFolderLock
from tests.reasoning_rl.faults.conftest import refusal, start, train

LONG = ["trainer.steps=100000", "trainer.save_every=1", "trainer.keep_checkpoints=1"]
"""A run that goes on until it is stopped (a checkpoint every step)."""


def _wait_for_steps(run, proc, steps: int, deadline_s: float = 240) -> None:
    deadline = time.monotonic() + deadline_s
    metrics = run / "metrics.jsonl"
    while not metrics.exists() or len(metrics.read_text().splitlines()) < steps:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the run logged no step in time"
        time.sleep(0.2)


def _stop(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=120)


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path):
    first = RunFolderLock(tmp_path).acquire()
    try:
        with pytest.raises(RunFolderBusy) as info:
            RunFolderLock(tmp_path).acquire()
        assert str(info.value).startswith(f"{tmp_path} is in use by another run (pid {os.getpid()} on ")
    finally:
        first.release()
    RunFolderLock(tmp_path).acquire().release()  # free again


def test_a_second_run_into_a_folder_in_use_is_refused_naming_the_pid(tmp_path):
    # Both used to exit 0, with every step twice in metrics.jsonl and "finished 10/10" in the report.
    run = tmp_path / "run"
    first = start(tmp_path, f"trainer.output_dir={run}", *LONG)
    try:
        _wait_for_steps(run, first, 1)
        second = train(tmp_path, f"trainer.output_dir={run}", *LONG)
        line = refusal(second)
        assert line.startswith(f"{run} is in use by another run (pid {first.pid} on "), line
        assert "choose another trainer.output_dir" in line
        assert json.loads((run / "status.json").read_text())["pid"] == first.pid  # the refused one wrote nothing
    finally:
        _stop(first)
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1))  # each step once, in order


def test_a_run_killed_with_sigkill_leaves_no_lock_that_blocks_the_next_command(tmp_path):
    run = tmp_path / "run"
    first = start(tmp_path, f"trainer.output_dir={run}", *LONG)
    try:
        _wait_for_steps(run, first, 1)
    finally:
        _stop(first, signal.SIGKILL)
    assert (run / LOCK_FILE).read_text().startswith(f"pid {first.pid} on ")  # the stale file is still there
    RunFolderLock(run).acquire().release()  # and locks at once: the kernel released the dead process's lock
