#!/usr/bin/env bash
# The tracker extras (trainer.loggers=[wandb, mlflow], docs/trackers.md), so that the main suite runs their
# tests against the real packages: W&B in offline mode, MLflow against a local `mlflow server` (SQLite) that
# tests/reasoning_rl/trackers/conftest.py starts on 127.0.0.1 and stops. Without a registry the install fails,
# is reported, and those tests are skipped with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
(pip install -q torch==2.13.0 && pip install -q -e ".[wandb,mlflow]") \
  || echo "warning: the wandb/mlflow extras could not be installed; tests/reasoning_rl/trackers is skipped" >&2
