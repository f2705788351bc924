"""MLflow for real: a tiny run logs to a local ``mlflow server`` (SQLite), read back with MlflowClient;
an unreachable server stops the command at start (one line, exit code 2); a server that goes away
mid-run is warned about once and the run goes on."""

import json
import logging
import os
import subprocess
import sys

import pytest

from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trackers import TrackingConfig, finish_trackers, open_trackers
from reasoning_rl.trackers.mlflow_tracker import metric_key
from tests.conftest import free_port
from tests.reasoning_rl.conftest import _train, tiny_config
from tests.reasoning_rl.test_cli_errors import PROG, TINY

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install -e '.[mlflow]'; "
                                              ".ci/trackers.sh)")


def test_a_run_logs_metrics_config_health_and_files_to_the_server(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    cfg = tiny_config(steps=10)
    cfg.trainer.save_every = 0
    cfg.trainer.loggers = ["mlflow"]
    cfg.trainer.tracking = TrackingConfig(project="rr-test", mlflow_tracking_uri=mlflow_server)
    cfg.trainer.health.thresholds["truncation"] = -1.0  # fires when its 10-step window is full: step 10
    run_dir = tmp_path / "run"
    _train(cfg, run_dir)
    finish_trackers(run_dir, "finished")

    client = MlflowClient(tracking_uri=mlflow_server)
    run = client.get_run(json.loads((run_dir / "trackers.json").read_text())["mlflow"])
    assert (run.info.status, run.info.run_name) == ("FINISHED", "run")
    assert client.get_experiment(run.info.experiment_id).name == "rr-test"
    assert run.data.params["trainer.steps"] == "10" and run.data.params["trainer.loggers"] == '["mlflow"]'
    metrics = read_metrics(run_dir / "metrics.jsonl")
    history = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [(h.step, h.value) for h in history] == [(m["step"], m["reward/mean"]) for m in metrics]
    logged = {metric_key(k) for m in metrics for k, v in m.items() if isinstance(v, (int, float)) and k != "step"}
    assert logged <= set(run.data.metrics)
    assert [(h.step, h.value) for h in client.get_metric_history(run.info.run_id, "health/truncation")] == [(10, 1.0)]
    assert run.data.tags["health.truncation"].startswith("fired at step 10: ")
    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.json", "health.jsonl", "reward_curve.png", "summary.json"} <= files


def test_sweep_runs_share_a_parent_and_a_resume_continues_the_run(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    tracking = TrackingConfig(project="rr-sweep", mlflow_tracking_uri=mlflow_server)
    ids = []
    for name in ("a", "b"):
        [t] = open_trackers(["mlflow"], tracking, tmp_path / name, {"x": name}, resume=False, group="sweeps/s1")
        t.log(1, {"reward/mean": 0.5})
        finish_trackers(tmp_path / name, "failed")
        ids.append(t.tracker.run_id)
    [again] = open_trackers(["mlflow"], tracking, tmp_path / "a", {"x": "a"}, resume=True, group="sweeps/s1")
    assert again.tracker.run_id == ids[0]
    again.log(2, {"reward/mean": 0.75})
    finish_trackers(tmp_path / "a", "finished")
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = [client.get_run(i) for i in ids]
    parents = {r.data.tags["mlflow.parentRunId"] for r in runs}
    assert len(parents) == 1 and client.get_run(parents.pop()).info.run_name == "s1"
    assert [h.value for h in client.get_metric_history(ids[0], "reward/mean")] == [0.5, 0.75]
    assert runs[0].info.status == "FINISHED"


def test_a_server_that_goes_away_is_warned_about_once_and_never_stops_the_run(tmp_path, mlflow_server, caplog,
                                                                               monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    tracking = TrackingConfig(project="rr-down", mlflow_tracking_uri=mlflow_server)
    [t] = open_trackers(["mlflow"], tracking, tmp_path, {}, resume=False, group=None)
    t.tracker.client = type(t.tracker.client)(tracking_uri=f"http://127.0.0.1:{free_port()}")  # nobody listens
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.trackers"):
        for step in (1, 2, 3):
            t.log(step, {"reward/mean": 0.5})
        finish_trackers(tmp_path, "finished")
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and warnings[0].startswith("tracker mlflow failed (log: ")


def test_an_unreachable_tracking_uri_stops_the_command_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    uri = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", *TINY, "trainer.loggers=[mlflow]",
                          f"trainer.tracking.mlflow_tracking_uri={uri}", f"trainer.output_dir={run_dir}"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"{PROG}invalid configuration: trainer.loggers=[mlflow]: the MLflow server {uri} does not answer (")
    assert not run_dir.exists()  # refused with the other settings, before anything is written
