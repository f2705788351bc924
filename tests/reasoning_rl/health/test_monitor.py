"""The health monitor in a run: health.jsonl, the log line, status.json's open warnings, and
``trainer.health.stop_on`` stopping a real run (failed, cause health:<rule>, exit code 2)."""

import json
import logging
import os
import shutil
import socket
import subprocess
import sys

import pytest

from reasoning_rl.health import HealthSink, HealthStop
from reasoning_rl.run_folder.status import read_status, update_status, write_status
from reasoning_rl.settings.trainer import HealthConfig
from tests.reasoning_rl.test_cli_errors import PROG, TINY


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_sink_writes_health_jsonl_logs_and_keeps_status_open_warnings(tmp_path, caplog):
    write_status(tmp_path, "running")
    sink = HealthSink(HealthConfig(), tmp_path)
    with caplog.at_level(logging.INFO, logger="reasoning_rl.health"):
        for step in range(1, 13):
            sink.log(step, {"completion/truncated_fraction": 0.9 if step <= 10 else 0.0})
        assert [e["rule"] for e in read_status(tmp_path)["health"]] == ["truncation"]
        for step in range(13, 20):
            sink.log(step, {"completion/truncated_fraction": 0.0})
    rows = _rows(tmp_path / "health.jsonl")
    # Fires once 10 steps average 0.9; clears at step 15, whose window (6..15) holds five 0.9 and five 0: 0.45.
    assert [(r["step"], r["rule"], r["event"]) for r in rows] == [(10, "truncation", "fired"),
                                                                  (15, "truncation", "cleared")]
    assert rows[0]["doc"] == "docs/health.md#truncation" and rows[0]["value"] == 0.9
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings[0].startswith("health: truncation at step 10 (completion/truncated_fraction: 0.9, threshold 0.5")
    assert warnings[1] == "health: truncation cleared at step 15"
    assert read_status(tmp_path)["health"] == []


def test_open_warnings_stay_in_status_json_when_the_run_ends_and_not_when_it_restarts(tmp_path):
    write_status(tmp_path, "running")
    sink = HealthSink(HealthConfig(), tmp_path)
    for step in range(1, 11):  # zero_variance needs 20 steps, truncation 10
        sink.log(step, {"groups/zero_std_fraction": 1.0, "completion/truncated_fraction": 0.6})
    update_status(tmp_path, preflight=[{"rule": "zero_variance"}])
    write_status(tmp_path, "finished", steps=10)
    assert [w["rule"] for w in read_status(tmp_path)["health"]] == ["truncation"]
    assert read_status(tmp_path)["preflight"] == [{"rule": "zero_variance"}]
    write_status(tmp_path, "running")
    assert "health" not in read_status(tmp_path)


def test_a_resumed_sink_keeps_the_rows_and_windows_up_to_its_step(tmp_path):
    first = HealthSink(HealthConfig(), tmp_path)
    rows = [{"step": s, "completion/truncated_fraction": 0.9} for s in range(1, 13)]
    for row in rows:
        first.log(row["step"], row)
    # Resumed from step 8 (the rule had not fired yet): 2 more steps fill the window again.
    resumed = HealthSink(HealthConfig(), tmp_path, resume_step=8, earlier=rows[:8])
    assert not (tmp_path / "health.jsonl").read_text().strip()
    resumed.log(9, rows[8])
    resumed.log(10, rows[9])
    assert [(r["step"], r["event"]) for r in _rows(tmp_path / "health.jsonl")] == [(10, "fired")]


def test_stop_on_raises_after_the_row_is_written(tmp_path):
    sink = HealthSink(HealthConfig(), tmp_path)
    sink.log(1, {"loss/total": 0.5})
    try:
        sink.log(2, {"loss/total": float("nan")})
    except HealthStop as exc:
        assert exc.cause == "health:non_finite"
        assert str(exc).startswith("stopped by trainer.health.stop_on: health: non_finite at step 2 (")
    else:
        raise AssertionError("non_finite did not stop the run")
    assert _rows(tmp_path / "health.jsonl")[0]["value"] == "nan"


def test_a_rule_in_stop_on_stops_a_real_run_failed_with_the_rule_as_cause(tmp_path):
    # A threshold of -1 makes truncation fire as soon as its window is full (step 10): the machinery
    # that stops a run on non_finite, exercised on a real run (a crafted NaN stops the sink above).
    run_dir = tmp_path / "run"
    args = [a for a in TINY if not a.startswith("trainer.steps=")] + [
        "trainer.steps=20", "trainer.save_every=0", "trainer.health.stop_on=[non_finite,truncation]",
        "trainer.health.thresholds.truncation=-1", f"trainer.output_dir={run_dir}"]
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", *args], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(PROG + "stopped by trainer.health.stop_on: health: truncation at step 10 "), last
    status = read_status(run_dir)
    assert (status["status"], status["cause"], status["stage"]) == ("failed", "health:truncation", "training")
    assert [w["rule"] for w in status["health"]] == ["truncation"]
    rows = _rows(run_dir / "health.jsonl")  # the preflight's findings (step 0) first, then the rule that stopped it
    assert [(r["step"], r["rule"]) for r in rows if r["event"] == "fired"] == [(10, "truncation")]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # the step that stopped it is logged


def test_a_folder_trained_before_the_rules_existed_can_be_resumed_with_them():
    from dataclasses import asdict

    from reasoning_rl.algo.grpo_config import GRPOConfig
    from reasoning_rl.config import TrainConfig
    from reasoning_rl.run_folder.status import config_differences

    new = asdict(TrainConfig(algo=GRPOConfig()))
    old = {**new, "trainer": {k: v for k, v in new["trainer"].items() if k not in ("health", "loggers", "tracking")}}
    assert config_differences(old, new) == []
    new["trainer"]["health"]["stop_on"] = ["non_finite", "kl_runaway"]
    assert config_differences(old, new) == []


def test_a_silent_sink_writes_nothing_and_stops_at_the_same_step(tmp_path):
    """The data-parallel ranks other than 0 (reasoning_rl.run_folder.log): no file, no line; the same stop."""
    loud, silent = HealthSink(HealthConfig(), tmp_path / "rank0"), HealthSink(HealthConfig(), tmp_path / "rank1",
                                                                               write=False)
    stops = []
    for sink in (loud, silent):
        for step, loss in enumerate([0.5, 0.4, float("inf")], start=1):
            try:
                sink.log(step, {"loss/total": loss})
            except HealthStop as exc:
                stops.append((step, exc.cause, str(exc)))
                break
    assert stops[0] == stops[1] and stops[0][:2] == (3, "health:non_finite")
    assert (tmp_path / "rank0" / "health.jsonl").exists() and not (tmp_path / "rank1").exists()


def test_under_torchrun_every_rank_stops_at_the_step_rank_0_stops(tmp_path):
    """Two gloo ranks on one machine: both ranks stop with the health rule's one line and exit code 2; no rank
    is left waiting in a collective for rank 0 (it used to end with a gloo "Connection closed by peer"
    traceback on rank 1, and torchrun could stop rank 0 while it recorded the failure)."""
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
    run_dir = tmp_path / "run"
    args = [a for a in TINY if not a.startswith("trainer.steps=")] + [
        "trainer.steps=20", "trainer.save_every=0", "trainer.health.stop_on=[non_finite,truncation]",
        "trainer.health.thresholds.truncation=-1", f"trainer.output_dir={run_dir}"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                          str(port), "-m", "reasoning_rl.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "Connection closed by peer" not in text and "[rank" not in text, text[-3000:]  # no rank's traceback
    assert text.count(PROG + "stopped by trainer.health.stop_on: health: truncation at step 10 ") == 2, text[-3000:]
    # torchrun's report names the first rank to exit, with code 2; it then signals the other, which may still
    # be exiting: which one is first is a race, harmless since both passed the barrier after rank 0 recorded.
    assert "exitcode  : 2" in text, text[-3000:]
    status = read_status(run_dir)
    assert (status["status"], status["cause"]) == ("failed", "health:truncation")
    assert [(r["step"], r["rule"]) for r in _rows(run_dir / "health.jsonl") if r["event"] == "fired"] == [
        (10, "truncation")]
