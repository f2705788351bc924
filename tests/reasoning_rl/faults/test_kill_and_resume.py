"""A forgotten flag never discards work (reasoning_rl.run_folder.lock): a killed run's command run again
resumes it; starting over takes trainer.resume=false and keeps the earlier files; other settings are refused."""

import json
import signal
import time

from reasoning_rl.run_folder.lock import REPLACED
from tests.reasoning_rl.faults.conftest import refusal, start, train

RUN = ["trainer.steps=12", "trainer.save_every=1", "trainer.keep_checkpoints=1"]


def _steps(run) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _killed_run(tmp_path, *extra: str):
    """``RUN`` killed with SIGKILL once it has logged (and checkpointed) a step; its folder."""
    run = tmp_path / "run"
    proc = start(tmp_path, f"trainer.output_dir={run}", *RUN, *extra)
    deadline = time.monotonic() + 240
    try:
        while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while not list(run.glob("checkpoint-*")):
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert json.loads((run / "status.json").read_text())["status"] == "running"  # killed: never recorded
    return run


def test_the_same_command_again_resumes_a_killed_run(tmp_path):
    # It used to start from step 1 and overwrite metrics.jsonl, completions.jsonl and the checkpoints.
    run = _killed_run(tmp_path)
    again = train(tmp_path, f"trainer.output_dir={run}", *RUN)
    assert again.returncode == 0, again.stderr[-3000:]
    said = [line for line in again.stderr.splitlines() + again.stdout.splitlines()
            if "holds an incomplete run with the same settings: resuming it from checkpoint-" in line]
    assert len(said) == 1, again.stderr[-3000:]
    assert _steps(run) == list(range(1, 13))  # each step once: the killed run's, then the rest
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    assert not (run / REPLACED).exists()


def test_resume_false_starts_over_and_keeps_the_earlier_files(tmp_path):
    run = _killed_run(tmp_path)
    before = (run / "metrics.jsonl").read_text()
    again = train(tmp_path, f"trainer.output_dir={run}", *RUN, "trainer.resume=false")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "starting over; its files (" in again.stdout + again.stderr
    (kept,) = (run / REPLACED).iterdir()
    assert (kept / "metrics.jsonl").read_text() == before  # nothing of the earlier run lost
    assert list(kept.glob("checkpoint-*"))
    assert _steps(run) == list(range(1, 13))


def test_other_settings_on_an_incomplete_run_are_refused_with_both_ways_on(tmp_path):
    run = _killed_run(tmp_path)
    line = refusal(train(tmp_path, f"trainer.output_dir={run}", *RUN, "trainer.seed=7"))
    assert line.startswith(f"{run} already holds a run with other settings (they differ at trainer.seed): "), line
    assert "choose another trainer.output_dir" in line and "trainer.resume=false" in line
