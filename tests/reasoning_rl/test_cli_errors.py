"""reasoning-rl-train on bad input: one short message on stderr naming the problem, exit code 2, no
traceback (unless asked for), and a run folder left as the corrected command needs it."""

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from reasoning_rl import cli
from reasoning_rl.cli import run_training, to_train_config
from reasoning_rl.config_store import register_configs
from reasoning_rl.entry_points import as_user_error
from reasoning_rl.errors import DEBUG_ENV
from reasoning_rl.run_folder.lock import RunFolderConflict, prepare_run_folder
from tests.reasoning_rl.conftest import TINY_OVERRIDES

PROG = "reasoning-rl-train: "
TINY = [*TINY_OVERRIDES, "trainer.steps=1"]


def _train(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reasoning_rl.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _message(out: subprocess.CompletedProcess) -> list[str]:
    """stderr of a refused command: exit code 2, no traceback, the message's lines."""
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith(PROG) and len(lines) <= 4, out.stderr
    return lines


@pytest.mark.parametrize(("args", "expected"), [
    # Hydra adds any key written with `+`; it used to run with group_size 8 and record grop_size: 4.
    (["+algo.grop_size=4"], ["unknown key algo.grop_size (did you mean algo.group_size?)"]),
    (["algo.grop_size=4"], ["unknown key algo.grop_size (did you mean algo.group_size?)"]),
    (["+trainer.foo=1"], ["unknown key trainer.foo (trainer has: failed_reward_window, fsdp, health, keep_checkpoints, keep_freed_memory, "]),
    (["algo.group_size=abc"], ["bad value for algo.group_size: Value 'abc' of type 'str' could not be converted "
                               "to Integer"]),
    (["task=gsm9k"], ["unknown task option task=gsm9k (did you mean gsm8k?); choose one of: arithmetic, "
                      "code_synthetic, code_synthetic_feedback, gsm8k, gsm8k_tool, math, math500, mawps_direct, mbpp, mbpp_feedback, "
                      "multiply, multiply_tool, stdio_code"]),
    (["algo.kl.beta=["], ["cannot parse the override 'algo.kl.beta=[': "]),
    (["trainer.save_every=-5", "trainer.keep_checkpoints=-1"],
     ["invalid configuration:", "  - trainer.save_every must be >= 0, got -5",
      "  - trainer.keep_checkpoints must be >= 1, got -1"]),
    (["task.name=gsm9k"], ["invalid configuration: task.name: unknown task 'gsm9k'. Did you mean 'gsm8k'?"]),
])
def test_bad_settings_are_one_message_and_write_nothing(tmp_path, args, expected):
    run = tmp_path / "run"
    lines = _message(_train(tmp_path, *args, f"trainer.output_dir={run}"))
    assert len(lines) == len(expected)
    for line, start in zip(lines, [PROG + expected[0], *expected[1:]]):
        assert line.startswith(start), lines
    assert not run.exists()  # nothing written: the corrected command finds a clean folder


def test_a_run_folder_under_a_file_names_the_path(tmp_path):
    (tmp_path / "afile").write_text("")  # we run as root, so chmod cannot make a folder read-only
    (line,) = _message(_train(tmp_path, f"trainer.output_dir={tmp_path}/afile/run"))
    assert line == (f"{PROG}cannot use {tmp_path}/afile/run: a part of the path is a file, not a folder; choose a "
                    "folder path (trainer.output_dir=<folder>, or hydra.sweep.dir=<folder> for a sweep)")


@pytest.mark.parametrize(("flag", "env"), [("--debug", {}), ("trainer.steps=1", {DEBUG_ENV: "1"})])
def test_debug_shows_the_traceback(tmp_path, flag, env):
    out = _train(tmp_path, flag, "+algo.grop_size=4", env=env)
    assert out.returncode == 2 and "Traceback (most recent call last)" in out.stderr
    assert out.stderr.strip().splitlines()[-1] == PROG + "unknown key algo.grop_size (did you mean algo.group_size?)"


def test_a_refused_sweep_records_each_run_and_the_corrected_one_may_use_its_folders(tmp_path):
    sweep = tmp_path / "sweep"
    out = _train(tmp_path, "--multirun", f"hydra.sweep.dir={sweep}", *TINY, "algo.kl.beta=0,0.04",
                 "trainer.save_every=-5")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == PROG + "invalid configuration: trainer.save_every must be >= 0, got -5"
    runs = sorted(sweep.glob("*/seed=0"))
    assert [r.parent.name for r in runs] == ["algo.kl.beta=0", "algo.kl.beta=0.04"]
    for run in runs:  # the report lists them as failed
        status = json.loads((run / "status.json").read_text())
        assert (status["status"], status["stage"]) == ("failed", "validation")
        assert "trainer.save_every must be >= 0" in status["error"]
        assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["save_every"] == -5
    # The corrected sweep writes into the same folders: nothing was trained there, so no conflict.
    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        fixed = compose(config_name="train", overrides=[*TINY, "algo.kl.beta=0", "trainer.save_every=5"])
    resolved = OmegaConf.to_container(fixed, resolve=True)
    assert prepare_run_folder(runs[0], resolved, to_train_config(fixed)) is False
    # Once a step was logged there, the folder holds a run: other settings are refused.
    (runs[0] / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunFolderConflict, match=r"trainer\.save_every"):
        prepare_run_folder(runs[0], resolved, to_train_config(fixed))


def test_a_full_disk_is_recorded_as_failed_and_reported_in_one_line(tmp_path, monkeypatch):
    """A checkpoint write that finds the disk full: status.json must say failed (it used to stay
    running, because recording the failure needed a new file too)."""
    run = tmp_path / "run"
    disk_full = []

    def atomic_write_text(path, text):
        if disk_full:
            raise OSError(errno.ENOSPC, "No space left on device", f"{path}.tmp")
        Path(path).write_text(text)

    class FullDiskTrainer:
        def __init__(self, cfg, run_dir):
            pass

        def train(self):
            disk_full.append(True)
            raise OSError(errno.ENOSPC, "No space left on device", str(run / "checkpoint-1" / "model.safetensors"))

        def close(self):
            pass

    monkeypatch.setattr("reasoning_rl.trainer.Trainer", FullDiskTrainer)
    monkeypatch.setattr("reasoning_rl.run_folder.status.atomic_write_text", atomic_write_text)
    monkeypatch.setattr(cli, "atomic_write_text", atomic_write_text)
    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=[*TINY, f"trainer.output_dir={run}"])
    with pytest.raises(OSError) as info:
        run_training(cfg)
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["stage"]) == ("failed", "training")
    assert status["error"].startswith("OSError: [Errno 28] No space left on device")
    assert status["note"].startswith("recorded in place")  # the atomic write (a new file) was refused
    assert str(as_user_error(info.value, cli.ELSEWHERE)) == (
        f"cannot use {run}/checkpoint-1/model.safetensors: no space left on the device; free some space there or "
        "write elsewhere (trainer.output_dir=<folder>, or hydra.sweep.dir=<folder> for a sweep)")


def test_every_user_error_class_is_documented():
    root = Path(__file__).resolve().parents[2]
    sources = [p for d in ("reasoning_rl", "rewards", "benchmarks") for p in (root / d).rglob("*.py")]
    classes = {m for p in sources for m in re.findall(r"^class (\w+)\(UserError\b", p.read_text(), re.M)}
    assert {"ConfigError", "StorageError", "MissingSolutionError", "RunFolderConflict"} <= classes
    docs = (root / "docs" / "errors.md").read_text()
    assert sorted(c for c in classes if f"`{c}`" not in docs) == []


def test_a_write_failure_on_a_full_disk_is_blamed_on_the_disk(tmp_path, monkeypatch):
    """torch's checkpoint writer says only "file write failed"; the free space tells why."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    failure = RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0: file write failed")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(10**9, 10**9 - 4096, 4096))
    error = cli.full_disk_error(tmp_path, failure)
    assert str(error).startswith(f"cannot write to {tmp_path}: its disk is full (4096 bytes free; the write failed "
                                 "with RuntimeError: [enforce fail")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(10**9, 0, 10**9))
    assert cli.full_disk_error(tmp_path, failure) is None  # a bug on a disk with room stays a bug
    # safetensors names the errno but not the file: the run folder is named instead.
    rust = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert str(cli.full_disk_error(tmp_path, rust)).startswith(
        f"cannot write to {tmp_path}: no space left on the device (Error while serializing")


def test_a_run_stopped_by_bad_data_leaves_a_true_record_and_a_reusable_folder(tmp_path, monkeypatch):
    from reasoning_rl.algo.sft import MissingSolutionError

    class NoSolutions:
        def __init__(self, cfg, run_dir):
            pass

        def train(self):  # what SFT's setup raises on rows without a reference solution
            raise MissingSolutionError("algo=sft needs a reference solution for every training row")

        def close(self):
            pass

    run = tmp_path / "run"
    monkeypatch.setattr("reasoning_rl.trainer.Trainer", NoSolutions)
    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        sft = compose(config_name="train", overrides=[*TINY, "algo=sft", f"trainer.output_dir={run}"])
        grpo = compose(config_name="train", overrides=[*TINY, f"trainer.output_dir={run}"])
    with pytest.raises(MissingSolutionError) as info:
        run_training(sft)
    assert str(as_user_error(info.value)) == "algo=sft needs a reference solution for every training row"
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["stage"]) == ("failed", "training")
    assert status["error"] == "MissingSolutionError: algo=sft needs a reference solution for every training row"
    # The corrected command (another algorithm) may use the folder: nothing was trained there.
    assert prepare_run_folder(run, OmegaConf.to_container(grpo, resolve=True), to_train_config(grpo)) is False


def test_sigterm_mid_training_records_failed_with_its_stage_and_exits_143(tmp_path):
    # `kill`, `timeout` or a scheduler's limit: the status says failed (not running forever), one line, 128 + 15.
    import signal
    import time

    run_dir = tmp_path / "run"
    args = [a for a in TINY if not a.startswith("trainer.steps=")] + ["trainer.steps=100000", "trainer.save_every=0",
                                                                    f"trainer.output_dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, "-m", "reasoning_rl.cli", *args], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == (PROG + "terminated by SIGTERM; the last checkpoint is intact: "
                                            "run the same command again to resume")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["stage"] == "training"
    assert "terminated by SIGTERM" in status["error"]
