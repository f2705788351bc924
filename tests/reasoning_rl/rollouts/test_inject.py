"""rollout.inject: the sampler is a seeded, perturbed or delayed copy of the policy; the trainer is not."""

from pathlib import Path

import pytest
import torch

from reasoning_rl.config_checks import ConfigError
from reasoning_rl.policy.engines import NativeEngine
from reasoning_rl.policy.loading import load_model
from reasoning_rl.rollouts.inject import InjectedEngine, inject_engine, perturb_
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.settings.rollout import InjectConfig
from reasoning_rl.validation import validate
from tests.reasoning_rl.conftest import _train, tiny_config
from tests.reasoning_rl.documented_metrics import METRICS_DOC, undocumented


@pytest.fixture(scope="module")
def policy():
    cfg = tiny_config()
    model, tokenizer = load_model(cfg.model)
    return model, tokenizer


def _bump(model, by):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(by)


def _first(model):
    return next(model.parameters()).detach().clone()


def test_stale_k_samples_with_the_weights_of_k_updates_ago(policy):
    model, tokenizer = policy
    model = type(model)(model.config)  # a private copy: this test changes its weights
    engine = InjectedEngine(NativeEngine(model, tokenizer), model, InjectConfig(stale=2))
    seen = []
    for version in range(4):  # the trainer's weights at version v are w0 + v
        engine.update_policy(model, version)
        seen.append((engine.policy_version, _first(engine.behaviour)))
        _bump(model, 1.0)
    w0 = seen[0][1]
    assert [v for v, _ in seen] == [0, 0, 0, 1]  # v - 2, never below the first version
    torch.testing.assert_close(seen[3][1], w0 + 1.0)  # version 3 samples with version 1's weights
    assert not torch.equal(_first(model), _first(engine.behaviour))  # the trainer is ahead


def test_noise_is_relative_to_each_tensor_and_seeded():
    w = {"a": torch.full((1000,), 2.0), "b": torch.full((1000,), -0.5), "ids": torch.arange(3)}
    perturb_(w, 0.1, torch.Generator().manual_seed(0))
    assert (w["a"] - 2.0).std() == pytest.approx(0.2, rel=0.1)  # sigma * rms = 0.1 * 2
    assert (w["b"] + 0.5).std() == pytest.approx(0.05, rel=0.1)  # 0.1 * 0.5
    assert w["ids"].tolist() == [0, 1, 2]  # integer tensors are left alone
    again = {"a": torch.full((1000,), 2.0), "b": torch.full((1000,), -0.5), "ids": torch.arange(3)}
    perturb_(again, 0.1, torch.Generator().manual_seed(0))
    assert torch.equal(w["a"], again["a"])


def test_the_copy_samples_with_behaviour_log_probs_and_leaves_the_policy_alone(policy):
    model, tokenizer = policy
    before = _first(model)
    engine = InjectedEngine(NativeEngine(model, tokenizer), model,
                            InjectConfig(noise=0.05, precision="bf16", temperature_skew=2.0), seed=3)
    engine.update_policy(model, 5)
    assert next(engine.behaviour.parameters()).dtype == torch.bfloat16
    assert torch.equal(_first(model), before) and next(model.parameters()).dtype == torch.float32
    sampling = SamplingConfig(temperature=0.5, max_new_tokens=4)
    groups = engine.generate(["1+1= ", "2+3= "], 2, sampling, seed=0)
    comps = [c for g in groups for c in g]
    assert all(c.policy_version == 5 and len(c.logprobs) == len(c.token_ids) for c in comps)
    assert all(lp <= 0 for c in comps for lp in c.logprobs)
    assert sampling.temperature == 0.5  # the caller's settings are not changed
    # same seed and version -> the same behaviour weights
    other = InjectedEngine(NativeEngine(model, tokenizer), model,
                           InjectConfig(noise=0.05, precision="bf16", temperature_skew=2.0), seed=3)
    other.update_policy(model, 5)
    assert torch.equal(_first(other.behaviour), _first(engine.behaviour))


def test_no_injection_keeps_the_engine():
    cfg = tiny_config()
    sentinel = object()
    assert inject_engine(sentinel, cfg.rollout, None, seed=0) is sentinel


def test_settings_that_cannot_run_are_refused():
    cfg = tiny_config()
    cfg.rollout.inject.precision = "int8"
    cfg.rollout.inject.noise = -1.0
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert "rollout.inject.precision='int8' is unknown" in str(err.value)
    assert "rollout.inject.noise" in str(err.value)
    cfg = tiny_config()
    cfg.rollout.inject.stale = 1
    cfg.rollout.backend = "vllm"
    with pytest.raises(ConfigError, match=r"rollout\.backend=hf or native"):
        validate(cfg)


def test_an_injected_run_logs_documented_mismatch_metrics_and_corrects(tmp_path):
    cfg = tiny_config(steps=3)
    cfg.rollout.backend = "native"
    cfg.rollout.inject.stale = 1
    cfg.rollout.inject.noise = 0.05
    cfg.algo.correction.name = "tis"
    cfg.trainer.save_every = 0
    _train(cfg, tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert undocumented(metrics[0]) == [], f"document these in {METRICS_DOC}"
    # step 1 samples with version 0 = the trainer's weights plus noise; from step 2 on, one version behind
    assert [m["mismatch/staleness_max"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all(m["mismatch/log_rho_abs_mean"] > 0 and 0 < m["mismatch/ess_fraction"] <= 1 for m in metrics)
    assert all(0 <= m["mismatch/truncated_token_fraction"] <= 1 for m in metrics)


INJECT_OPTIONS = sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "conf" / "rollout" / "inject").glob("*.yaml"))


@pytest.mark.parametrize("name", INJECT_OPTIONS)
def test_every_inject_option_composes_into_the_lab_and_validates(name):
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs

    register_configs()
    with initialize_config_module("conf", version_base=None):
        cfg = to_train_config(compose("train", overrides=["experiment=offpolicy_lab", f"rollout/inject={name}"]))
    validate(cfg)
    assert cfg.rollout.inject.active() == (name != "none")
    assert isinstance(cfg.rollout.inject, InjectConfig)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_corrections_run_in_both_algorithms_with_several_updates_a_batch(algo, tmp_path):
    from reasoning_rl.algo.ppo import PPOConfig
    from rewards.specs import RewardSpec

    cfg = tiny_config(steps=2)
    cfg.trainer.save_every = 0
    cfg.rollout.inject.noise = 0.1
    if algo == "ppo":  # "has a digit" varies between samples of the untrained model: advantages are not all 0
        cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
        cfg.algo = PPOConfig(prompts_per_step=4, group_size=1, micro_batch_size=3, learning_rate=1e-3)
    cfg.algo.num_iterations = 2  # decoupled: w(pi_old / mu) fixed over both updates, the clip on pi_theta / pi_old
    cfg.algo.correction.name = "icepop" if algo == "ppo" else "dppo_tv"
    _train(cfg, tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(m["mismatch/log_rho_abs_mean"] > 0 and m["loss/total"] == m["loss/total"] for m in metrics)
    assert undocumented(metrics[0]) == []


def test_only_the_training_rollouts_come_from_the_copy(tmp_path):
    from reasoning_rl.trainer import Trainer

    cfg = tiny_config()
    cfg.rollout.inject.noise = 0.1
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert isinstance(trainer.context.engine, InjectedEngine)  # what the algorithm samples from
        assert trainer.engine.model is trainer.model  # evaluation and the KL probe: the policy itself
        assert trainer.context.engine.behaviour is not trainer.model
    finally:
        trainer.close()
