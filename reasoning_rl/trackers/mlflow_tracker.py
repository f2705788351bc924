"""MLflow (``trainer.loggers=[mlflow]``, extra ``.[mlflow]``): one MLflow run per training run, under a
parent run per sweep; metrics at their step, the resolved config as params and config.json, health events
as tags and ``health/<rule>`` metrics, the run's files as artifacts. Uses ``MlflowClient`` only (no
process-global active run)."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasoning_rl.errors import UserError
from reasoning_rl.settings.trainer import TrackingConfig

SWEEP_TAG = "reasoning_rl.sweep"


class TrackerUnreachableError(UserError):
    """A tracker server that does not answer when the run starts."""


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """An http(s) tracking URI must answer ``GET <uri>/health`` before the run starts."""
    if not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as response:
            response.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TrackerUnreachableError(
            f"trainer.loggers=[mlflow]: the MLflow server {uri} does not answer ({reason}); start it "
            f"(mlflow server --host 127.0.0.1 --port ...), fix trainer.tracking.mlflow_tracking_uri, or drop mlflow "
            f"from trainer.loggers") from None


def tracking_uri(cfg: TrackingConfig) -> str:
    return cfg.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()


def metric_key(key: str) -> str:
    """MLflow allows letters, digits, ``_ - . / `` and space in a key: ``eval/pass@4`` -> ``eval/pass_at_4``."""
    return re.sub(r"[^\w\-./ ]", "_", key.replace("@", "_at_"))


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value, default=str)[:6000]
    return out


class MlflowTracker:
    def __init__(self, run_dir: Path, cfg: TrackingConfig, config: Mapping[str, Any], run_id: str | None,
                 group: str | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = tracking_uri(cfg)
        check_reachable(uri)
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(cfg.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(cfg.project)
        if run_id is None:
            tags = {"mlflow.parentRunId": self._parent(experiment_id, group)} if group else {}
            run = self.client.create_run(experiment_id, run_name=cfg.run_name or Path(run_dir).name, tags=tags)
            run_id = run.info.run_id
            params = [Param(k, v) for k, v in flatten(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a call
                self.client.log_batch(run_id, params=params[i:i + 100])
            self.client.log_dict(run_id, dict(config), "config.json")
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def _parent(self, experiment_id: str, group: str) -> str:
        """The sweep's parent run (found by its tag, created by the sweep's first run)."""
        found = self.client.search_runs([experiment_id], filter_string=f"tags.`{SWEEP_TAG}` = '{group}'", max_results=1)
        if found:
            return found[0].info.run_id
        return self.client.create_run(experiment_id, run_name=Path(group).name, tags={SWEEP_TAG: group}).info.run_id

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_key(k), v, now, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def log_health(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        for r in rows:
            self.client.log_metric(self.run_id, f"health/{r['rule']}", float(r["event"] == "fired"), step=step)
            self.client.set_tag(self.run_id, f"health.{r['rule']}", f"{r['event']} at step {r['step']}: {r['advice']}")

    def log_artifacts(self, paths: Sequence[Path]) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if status == "finished" else "FAILED")
