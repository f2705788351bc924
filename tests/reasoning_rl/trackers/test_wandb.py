"""W&B for real, in offline mode: a tiny run's metrics, config, health events and files are read back
from the offline run file; a resumed run continues the same W&B run."""

import json

import pytest

from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trackers import TrackingConfig, finish_trackers, open_trackers
from tests.reasoning_rl.conftest import _train, tiny_config
from tests.reasoning_rl.trackers.wandb_offline import history, read_finished_run

pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install -e '.[wandb]'; .ci/trackers.sh)")


@pytest.fixture(autouse=True)
def _quiet_offline(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")


def _runs(run_dir):
    """The offline run files under the run folder, oldest first, read back."""
    return [read_finished_run(p) for p in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))]


def _of(records, kind):
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def test_a_run_logs_every_metric_at_its_step_the_config_health_and_files(tmp_path):
    cfg = tiny_config(steps=10)
    cfg.trainer.save_every = 0
    cfg.trainer.loggers = ["wandb"]
    cfg.trainer.tracking = TrackingConfig(project="rr-test", wandb_mode="offline")
    cfg.trainer.health.thresholds["truncation"] = -1.0  # fires when its 10-step window is full: step 10
    run_dir = tmp_path / "run"
    _train(cfg, run_dir)
    finish_trackers(run_dir, "finished")  # what the CLI does once summary and evaluation table are written

    [records] = _runs(run_dir)
    run = _of(records, "run")[0]
    assert run.run_id == json.loads((run_dir / "trackers.json").read_text())["wandb"]
    assert (run.project, run.display_name) == ("rr-test", "run")
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["trainer"]["steps"] == 10 and config["trainer"]["loggers"] == ["wandb"]

    logged = {}
    for row in history(records):
        logged.setdefault(row["_step"], {}).update(row)
    for m in read_metrics(run_dir / "metrics.jsonl"):
        for key, value in m.items():
            if isinstance(value, (int, float)) and key != "step":
                assert logged[m["step"]][key] == value, (m["step"], key)  # JSON round trip: the same float
    assert logged[10]["health/truncation"] == 1.0

    [artifact] = _of(records, "artifact")
    files = {c.path for c in artifact.manifest.contents}
    assert {"health.jsonl", "reward_curve.png", "summary.json"} <= files
    summary = {u.key or "/".join(u.nested_key): u.value_json for s in _of(records, "summary") for u in s.update}
    assert json.loads(summary["status"]) == "finished"
    assert json.loads(summary["health_event/truncation"]).startswith("fired at step 10: ")


def test_a_resumed_run_continues_the_same_wandb_run(tmp_path):
    tracking = TrackingConfig(project="rr-test", wandb_mode="offline")
    [first] = open_trackers(["wandb"], tracking, tmp_path, {"a": 1}, resume=False, group="sweep-1")
    first.log(1, {"reward/mean": 0.25})
    finish_trackers(tmp_path, "failed")
    [again] = open_trackers(["wandb"], tracking, tmp_path, {"a": 1}, resume=True, group="sweep-1")
    again.log(2, {"reward/mean": 0.5})
    finish_trackers(tmp_path, "finished")
    runs = _runs(tmp_path)
    assert len(runs) == 2
    assert {_of(r, "run")[0].run_id for r in runs} == {first.tracker.run_id} == {again.tracker.run_id}
    assert [_of(r, "run")[0].run_group for r in runs] == ["sweep-1", "sweep-1"]
    assert [row["reward/mean"] for r in runs for row in history(r)] == [0.25, 0.5]


def test_a_tracker_that_cannot_start_is_warned_about_once_and_the_run_goes_on(tmp_path, caplog):
    import logging

    # W&B refuses an unknown mode when it starts: the run goes on with the other trackers.
    tracking = TrackingConfig(project="rr-test", wandb_mode="no-such-mode")
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.trackers"):
        assert open_trackers(["tensorboard", "wandb"], tracking, tmp_path, {}, resume=False, group=None) == []
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith("tracker wandb could not start (")


def test_the_runs_of_a_sweep_form_one_wandb_group_with_their_files(tmp_path):
    from tests.reasoning_rl.test_sweeps import _sweep

    sweep = tmp_path / "sweep"
    out = _sweep(sweep, "trainer.seed=0,1", "trainer.loggers=[wandb]", "trainer.tracking.wandb_mode=offline")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = [read_finished_run(p) for p in sorted(sweep.glob("*/seed=*/wandb/offline-run-*/run-*.wandb"))]
    assert len(runs) == 2
    assert {_of(r, "run")[0].run_group for r in runs} == {str(sweep)}
    for records in runs:  # the CLI sent the files once the run ended: eval table and the dashboard included
        [artifact] = _of(records, "artifact")
        assert {"config.yaml", "eval_table.md", "reward_curve.png", "status.json"} <= {
            c.path for c in artifact.manifest.contents}
