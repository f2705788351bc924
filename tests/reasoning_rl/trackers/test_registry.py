"""trainer.loggers on bad input: an unknown name lists the known ones, a missing package names its extra;
both refuse the command before anything is written (exit code 2)."""

import importlib.util

import pytest

from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.trackers import TRACKERS, logger_problems
from reasoning_rl.validation import validate


def test_an_unknown_logger_lists_the_known_ones():
    assert logger_problems(["wandbb"]) == ["trainer.loggers: unknown logger 'wandbb' (did you mean wandb?); "
                                           "the loggers are tensorboard, wandb, mlflow"]


def test_a_missing_package_names_the_extra(monkeypatch):
    # Unit test of the message: the package lookup answers "not installed" for mlflow only.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.trainer.loggers = ["tensorboard", "mlflow"]
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value) == ("invalid configuration: trainer.loggers=[mlflow] needs the mlflow package: "
                               "pip install \"reasoning-rl[mlflow]\" (or pip install -e \".[mlflow]\")")


def test_every_tracker_has_an_extra_in_pyproject():
    from tests.conftest import REPO_ROOT

    text = (REPO_ROOT / "pyproject.toml").read_text()
    assert [e.extra for e in TRACKERS.values() if f"\n{e.extra} = [" not in text] == []
