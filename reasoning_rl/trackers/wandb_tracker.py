"""Weights & Biases (``trainer.loggers=[wandb]``, extra ``.[wandb]``): one W&B run per training run,
grouped by sweep; metrics at their step, the resolved config, health events, the run's files as an artifact."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasoning_rl.settings.trainer import TrackingConfig


class WandbTracker:
    def __init__(self, run_dir: Path, cfg: TrackingConfig, config: Mapping[str, Any], run_id: str | None,
                 group: str | None) -> None:
        import wandb

        mode = cfg.wandb_mode or os.environ.get("WANDB_MODE") or "online"
        self.run = wandb.init(project=cfg.project, name=cfg.run_name or Path(run_dir).name, id=run_id,
                              resume="allow" if run_id else None, group=group, config=dict(config),
                              dir=str(run_dir), mode=mode)
        self.run_id = self.run.id

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def log_health(self, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
        # health/<rule>: 1 from the step a rule fires, 0 from the step it clears; the summary keeps the event.
        self.run.log({f"health/{r['rule']}": float(r["event"] == "fired") for r in rows}, step=step)
        for r in rows:
            self.run.summary[f"health_event/{r['rule']}"] = f"{r['event']} at step {r['step']}: {r['advice']}"

    def log_artifacts(self, paths: Sequence[Path]) -> None:
        import wandb

        artifact = wandb.Artifact(f"run-{self.run_id}-files", type="run-files")
        for path in paths:
            artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def finish(self, status: str) -> None:
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "finished" else 1)
