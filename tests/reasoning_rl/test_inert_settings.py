"""No setting without effect: every row of the table is refused (or warned about) when set while it
cannot act, and is silent once its condition holds; the shipped configurations trigger no refusal."""

import logging

import pytest
from hydra import compose, initialize_config_module

from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.cli import to_train_config
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.config_store import register_configs
from reasoning_rl.inert_settings import INERT, inert_settings, value_and_default
from reasoning_rl.validation import validate
from tests.conftest import REPO_ROOT

CONF = REPO_ROOT / "conf"

ENABLE = {
    "task.audit.verifier is set": lambda c: setattr(c.task.audit, "verifier", "math"),
    "algo.correction.name=tis": lambda c: setattr(c.algo.correction, "name", "tis"),
    "algo.correction.name is one of mis_token, mis_seq, mis_geo": lambda c: setattr(c.algo.correction, "name", "mis_seq"),
    "algo.correction.name=dppo_tv": lambda c: setattr(c.algo.correction, "name", "dppo_tv"),
    "algo.correction.name=trust_region_mask": lambda c: setattr(c.algo.correction, "name", "trust_region_mask"),
    "algo.entropy_control.name is clip_cov or kl_cov": lambda c: setattr(c.algo.entropy_control, "name", "clip_cov"),
    "algo.entropy_control.name=clip_cov": lambda c: setattr(c.algo.entropy_control, "name", "clip_cov"),
    "algo.entropy_control.name=kl_cov": lambda c: (setattr(c.algo.entropy_control, "name", "kl_cov"),
                                              setattr(c.algo, "num_iterations", 2)),
    "algo.entropy_control.name=high_entropy": lambda c: setattr(c.algo.entropy_control, "name", "high_entropy"),
    "algo.advantage.estimator=w_reinforce": lambda c: setattr(c.algo.advantage, "estimator", "w_reinforce"),
    "algo.advantage.estimator=pass_at_k": lambda c: setattr(c.algo.advantage, "estimator", "pass_at_k"),
    "algo.dynamic_sampling.enabled=true": lambda c: setattr(c.algo.dynamic_sampling, "enabled", True),
    "algo.kl.beta > 0": lambda c: setattr(c.algo.kl, "beta", 0.04),
    "evaluation.kl_to_base_every > 0": lambda c: setattr(c.evaluation, "kl_to_base_every", 5),
    "evaluation.retention.task is set": lambda c: setattr(c.evaluation.retention, "task", "code_synthetic"),
    "evaluation.enabled=true": lambda c: setattr(c.evaluation, "enabled", True),
    "warmstart.enabled=true": lambda c: setattr(c.warmstart, "enabled", True),
    "rollout.backend=vllm": lambda c: setattr(c.rollout, "backend", "vllm"),
    "trainer.health.enabled=true": lambda c: setattr(c.trainer.health, "enabled", True),
    "trainer.loggers has wandb or mlflow": lambda c: setattr(c.trainer, "loggers", ["mlflow"]),
    "trainer.loggers has mlflow": lambda c: setattr(c.trainer, "loggers", ["mlflow"]),
    "trainer.loggers has wandb": lambda c: setattr(c.trainer, "loggers", ["wandb"]),
}
"""Each row's condition, made to hold."""

DISABLE = {
    "algo.kl.beta > 0": lambda c: setattr(c.algo.kl, "beta", 0.0),
    "evaluation.enabled=true": lambda c: setattr(c.evaluation, "enabled", False),
    "trainer.health.enabled=true": lambda c: setattr(c.trainer.health, "enabled", False),
}
"""Conditions that hold in the default config, made not to."""

CHANGED = {"algo.kl.estimator": "k1", "algo.kl.placement": "reward", "warmstart.target": "solution",
           "rollout.vllm_dtype": "bfloat16", "trainer.health.stop_on": [], "trainer.health.disable": ["tamper"],
           "trainer.health.thresholds": {"truncation": 0.3}, "task.audit.options": {"strict": True},
           "evaluation.retention.split": "test", "evaluation.retention.data_file": "x.jsonl",
           "evaluation.retention.stop": ["\n"], "rollout.vllm_sleep_mode": True, "rollout.vllm_max_model_len": 512,
           "trainer.tracking.run_name": "r1", "trainer.tracking.mlflow_tracking_uri": "http://127.0.0.1:5000",
           "trainer.tracking.wandb_mode": "offline"}
"""A value other than the default, where the type's rule below does not give one."""


def _changed(default):
    if isinstance(default, bool):
        return not default
    if isinstance(default, int) or default is None:
        return (default or 0) + 3
    if isinstance(default, float):
        return default / 2 + 0.01
    return default + "_x"


def _set(cfg, dotted, value):
    *path, name = dotted.split(".")
    owner = cfg
    for part in path:
        owner = getattr(owner, part)
    setattr(owner, name, value)


def _config(row):
    cfg = TrainConfig(algo=GRPOConfig())
    DISABLE.get(row.needs, lambda c: None)(cfg)
    _, default = value_and_default(cfg, row.setting)
    _set(cfg, row.setting, CHANGED[row.setting] if row.setting in CHANGED else _changed(default))
    return cfg


@pytest.mark.parametrize("row", INERT, ids=[r.setting for r in INERT])
def test_each_row_speaks_when_set_without_its_condition_and_not_with_it(row, caplog):
    cfg = _config(row)
    assert [r.setting for r, _ in inert_settings(cfg)] == [row.setting]
    if row.refuse:
        with pytest.raises(ConfigError) as info:
            validate(cfg)
        assert f"{row.setting}=" in str(info.value) and f"has no effect unless {row.needs}" in str(info.value)
    else:
        with caplog.at_level(logging.WARNING, logger="reasoning_rl.inert_settings"):
            try:
                validate(cfg)
            except ConfigError as exc:  # another check may refuse the changed value itself, never this row
                assert row.setting + "=" not in str(exc)
        assert any(f"{row.setting}=" in r.getMessage() and "(ignored)" in r.getMessage() for r in caplog.records)
    ENABLE[row.needs](cfg)
    assert row.setting not in [r.setting for r, _ in inert_settings(cfg)]


def test_the_audit_fraction_without_a_verifier_is_one_line_naming_what_to_set():
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.task.audit.fraction = 0.5
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value) == ("invalid configuration: task.audit.fraction=0.5 has no effect unless task.audit.verifier "
                               "is set: set task.audit.verifier (e.g. math, math_verify, code) or drop task.audit.fraction")


def test_defaults_are_never_reported():
    assert inert_settings(TrainConfig(algo=GRPOConfig())) == []


GROUPS = [(g, p.stem) for g in ("algo", "task", "model", "rollout") for p in sorted((CONF / g).glob("*.yaml"))]


@pytest.mark.parametrize(("group", "option"), GROUPS, ids=[f"{g}={o}" for g, o in GROUPS])
def test_no_shipped_group_option_is_refused(group, option):
    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=[f"{group}={option}"]))
    assert [(r.setting, v) for r, v in inert_settings(cfg) if r.refuse] == []


def test_docs_list_every_row():
    doc = (REPO_ROOT / "docs" / "errors.md").read_text()
    assert [r.setting for r in INERT if f"`{r.setting}`" not in doc] == []
