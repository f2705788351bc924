"""PPO with a critic on the shared run loop: config truth, the critic, tiny end-to-end CPU runs."""

import dataclasses
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from reasoning_rl.algo import get_algorithm
from reasoning_rl.algo.losses import KLPenaltyConfig
from reasoning_rl.algo.ppo import PPO, PPOConfig, build_critic
from reasoning_rl.batching import pack
from reasoning_rl.cli import to_train_config
from reasoning_rl.config import TrainConfig
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.run_folder.checkpoint import latest_checkpoint, list_checkpoints, load_trainer_state
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.trainer import Trainer
from reasoning_rl.validation import validate
from rewards.specs import RewardSpec
from tests.conftest import assert_close_up_to_rounding, decoder_terms, free_port
from tests.reasoning_rl.conftest import _train, compose_train, tiny_config
from tests.reasoning_rl.documented_metrics import METRICS_DOC, documented_for, undocumented

CONF = Path(__file__).resolve().parents[3] / "conf"
REPO = Path(__file__).resolve().parents[3]

PPO_METRICS = documented_for("PPO")
"""PPO's own metrics: those docs/metrics.md describes as "PPO: ..." (the value loss, the critic's, ...)."""


# -- config ----------------------------------------------------------------------------------------

def test_ppo_is_registered_with_its_config():
    entry = get_algorithm("ppo")
    assert (entry.algorithm, entry.config_class) == (PPO, PPOConfig)


def test_schema_defaults_equal_the_yaml():
    values = {k: v for k, v in yaml.safe_load((CONF / "algo" / "ppo.yaml").read_text()).items() if k != "defaults"}
    defaults = {f.name: dataclasses.asdict(f.default_factory()) if f.default is dataclasses.MISSING else f.default
                for f in dataclasses.fields(PPOConfig)}  # a group (policy_loss, kl, correction) as its YAML block
    assert set(values) == set(defaults), set(values) ^ set(defaults)  # every field is in the YAML
    assert {k: v for k, v in values.items() if v != defaults[k]} == {}
    assert (CONF / "algo" / "ppo.yaml").read_text().startswith("# reasoning-rl-train algo=ppo")


def test_algo_ppo_composes_and_validates():
    cfg = to_train_config(compose_train(["algo=ppo", "algo.critic=value_head"]))
    assert isinstance(cfg.algo, PPOConfig)
    assert (cfg.algo.name, cfg.algo.critic, cfg.algo.group_size) == ("ppo", "value_head", 1)
    validate(cfg)
    with pytest.raises(Exception, match="lamda"):
        compose_train(["algo=ppo", "algo.lamda=0.9"])


def test_problems_name_every_bad_key():
    bad = PPOConfig(group_size=0, gamma=1.5, value_clip=0.0, critic="shared", num_iterations=0,
                    loss_aggregation="median", vf_coef=-1.0)
    text = "\n".join(bad.problems())
    for key in ("group_size", "gamma", "value_clip", "critic", "num_iterations", "loss_aggregation", "vf_coef"):
        assert f"algo.{key}" in text
    assert PPOConfig().problems() == []


# -- the critic ------------------------------------------------------------------------------------

@pytest.mark.numerics
def test_critic_kinds_own_or_share_the_policy_transformer():
    policy, tokenizer = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2,
                                                         intermediate_size=64))
    separate, shared = build_critic(policy, "separate"), build_critic(policy, "value_head")
    assert shared.backbone is policy.base_model
    assert [p.data_ptr() for p in shared.own_parameters()] == [p.data_ptr() for p in shared.head.parameters()]
    policy_ptrs = {p.data_ptr() for p in policy.parameters()}
    assert not policy_ptrs & {p.data_ptr() for p in separate.own_parameters()}  # a copy, not a view
    for a, b in zip(separate.backbone.parameters(), policy.base_model.parameters()):
        assert torch.equal(a, b)  # initialised from the policy
    # V(s_t) is read at the position that predicts completion token t; the head starts at 0.
    packed = pack([[5, 6, 7], [8, 9]], [[10, 11], [12]], tokenizer.pad_token_id)
    with torch.no_grad():
        torch.nn.init.ones_(separate.head.weight)
        values = separate(packed)  # [2, 2]
        hidden = policy.base_model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                                   position_ids=(packed.attention_mask.cumsum(-1) - 1).clamp(min=0)).last_hidden_state
    p = packed.completion_start  # 3: prompt width
    # The head's ones-weight sums the hidden state: the backbone's chain plus the hidden size, at the scale of the
    # summed terms (sum |h_i|: the values are small differences of them).
    terms, scale = decoder_terms(policy.config, positions=8) + policy.config.hidden_size, float(hidden.abs().sum(-1).max())
    assert_close_up_to_rounding(values[0], hidden[0, p - 1:p + 1].sum(-1), terms=terms, scale=scale)
    assert_close_up_to_rounding(values[1, 0], hidden[1, p - 1].sum(), terms=terms, scale=scale)
    assert values[1, 1].item() == 0.0  # padding
    assert shared(packed).abs().sum().item() == 0.0


# -- end to end ------------------------------------------------------------------------------------

def _ppo_cfg(small_cfg, **algo) -> TrainConfig:
    # "has a digit" varies between samples of the untrained tiny model: advantages are not all 0.
    small_cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
    options = dict(prompts_per_step=4, group_size=1, micro_batch_size=3, learning_rate=1e-3, kl=KLPenaltyConfig(beta=0.04))
    options.update(algo)
    return TrainConfig(task=small_cfg.task, model=small_cfg.model, rollout=small_cfg.rollout,
                       trainer=small_cfg.trainer, evaluation=small_cfg.evaluation, algo=PPOConfig(**options))


@pytest.mark.numerics
@pytest.mark.parametrize("critic, group_size", [("separate", 1), ("value_head", 2)])
def test_end_to_end_logs_checkpoints_and_reloads(small_cfg, tmp_path, critic, group_size):
    cfg = _ppo_cfg(small_cfg, critic=critic, group_size=group_size)
    trainer, summary = _train(cfg, tmp_path / "run")
    run = tmp_path / "run"
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert undocumented(metrics[0]) == [], f"document these in {METRICS_DOC}"
    assert len(PPO_METRICS) >= 8 and all(set(m) == set(metrics[0]) >= PPO_METRICS for m in metrics), \
        PPO_METRICS - set(metrics[0])
    # policy == reference at step 1: rounding of two log-prob paths (their scale, about log V; k3 ~ d^2 / 2).
    assert_close_up_to_rounding(metrics[0]["kl/mean"], 0.0, terms=decoder_terms(trainer.model.config, positions=64),
                                scale=math.log(trainer.model.config.vocab_size), msg="kl/mean at step 1")
    assert metrics[0]["value/mean"] == 0.0  # the head starts at 0
    assert any(m["advantage/abs_mean"] > 0 for m in metrics)
    assert any(m["loss/value"] > 0 for m in metrics) and metrics[-1]["value/mean"] != 0.0  # the critic learnt
    assert summary["algorithm"] == "ppo" and summary["label"] == "PPO" and summary["eval_after"]
    assert len((run / "completions.jsonl").read_text().splitlines()) == 4 * 4 * group_size
    # Checkpoints: the policy in Hugging Face format, the critic in the trainer state.
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint-2", "checkpoint-4"]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(latest_checkpoint(run))
    for a, b in zip(model.parameters(), trainer.model.parameters()):
        assert torch.equal(a, b)
    saved = load_trainer_state(latest_checkpoint(run))["critic"]
    own = trainer.algorithm.critic.own_state_dict()
    assert saved.keys() == own.keys() and all(torch.equal(saved[k], own[k]) for k in own)
    assert ("head.weight" in saved) == (critic == "separate")  # value_head saves its head alone
    # Memory: the separate critic is a second transformer; the value head adds a few bytes.
    state = summary["memory"]["parameters_gb"] * 1024 ** 3
    policy_bytes = sum(p.numel() * p.element_size() for p in trainer.model.parameters())
    assert state > (2.5 if critic == "separate" else 1.9) * policy_bytes


@pytest.mark.numerics
@pytest.mark.parametrize("critic", ["separate", "value_head"])
def test_resume_matches_uninterrupted_run(small_cfg, tmp_path, critic, resume_matches_uninterrupted_run):
    cfg = _ppo_cfg(small_cfg, critic=critic, num_iterations=2)
    cfg.evaluation.enabled = False
    full = resume_matches_uninterrupted_run(cfg, tmp_path)  # killed in step 3, resumed: same metrics
    assert any(abs(m["ratio/mean"] - 1.0) > 1e-6 for m in full)  # the second epoch moved off pi_old


def test_unscorable_rewards_get_zero_advantage_and_no_value_loss(small_cfg, tmp_path):
    """A reward that cannot score leaves the sample out: advantage 0, no value target, never a 0 reward."""
    cfg = _ppo_cfg(small_cfg)
    cfg.task.rewards = [RewardSpec(name="overlong", options={"max_length": 4, "buffer": 2,
                                                             "length_field": "missing"})]
    cfg.evaluation.enabled = False
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer._setup_algorithm()
        ro = trainer.algorithm.rollout(0)
        metrics = trainer.algorithm.update(ro)
    finally:
        trainer.close()
    assert torch.isnan(ro.groups.rewards).all()
    assert ro.advantages.abs().sum() == 0 and ro.value_mask.sum() == 0
    assert metrics["loss/value"] == 0.0 and metrics["loss/policy"] == 0.0
    assert ro.groups.verifier_failures["unscorable"] == 4


def test_the_critic_fits_a_fixed_batch(small_cfg, tmp_path):
    """Epochs on one batch of rollouts drive the value loss down (clipping off)."""
    cfg = _ppo_cfg(small_cfg, prompts_per_step=8, micro_batch_size=8, value_clip=1e9, critic_learning_rate=3e-3,
                   learning_rate=0.0)
    cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "."})]  # 1 for any text: R ~ 1, V_old = 0
    cfg.evaluation.enabled = False
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer._setup_algorithm()
        ro = trainer.algorithm.rollout(0)
        losses = [trainer.algorithm.update(ro)["loss/value"] for _ in range(15)]
    finally:
        trainer.close()
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.numerics
@pytest.mark.slow
def test_two_ranks_log_the_token_means_of_one_process(tmp_path):
    """Data-parallel PPO divided each rank's token sums (ratio, clips, entropy) by the GLOBAL token
    count, so at one update ratio/mean read 0.51 on two ranks instead of 1 and entropy/mean half
    the one-process value; and each rank whitened its advantages with its own shard's statistics.
    The same step (fixed completions: dist_worker.FixedEngine) on one process and on two gloo
    ranks must log the same token means, advantages, losses and gradient norms."""
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
    worker = str(Path(__file__).with_name("ppo_dist_worker.py"))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    two = [torchrun, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    procs = [subprocess.Popen([*launcher, worker, str(tmp_path / name)], cwd=REPO, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for name, launcher in (("one", [sys.executable]), ("two", two))]
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output[-4000:]
    (one,), (two_ranks,) = (read_metrics(tmp_path / name / "metrics.jsonl") for name in ("one", "two"))
    # The rule of tests/conftest.py: dist_worker.py's tiny decoder (tiny_config's shape) over rows of under 64
    # positions, gradients summed over the step's 4 x 2 rows; values of log-prob size (about log V) or their own.
    config = build_tiny_model(tiny_config().model.tiny)[0].config
    terms = decoder_terms(config, positions=64, rows=8)
    # pi_theta = pi_old at the first update: ratio = exp(logp - logp_old) of two evaluations of one forward.
    assert_close_up_to_rounding(two_ranks["ratio/mean"], 1.0, terms=terms, scale=math.log(config.vocab_size))
    for key in ("ratio/mean", "entropy/mean", "clip/low_fraction", "clip/high_fraction", "clip/value_fraction",
                "kl/mean", "value/mean", "value/return_mean", "advantage/abs_mean", "completion/tokens",
                "loss/total", "loss/policy", "loss/value", "grad/norm", "grad/critic_norm"):
        assert_close_up_to_rounding(two_ranks[key], one[key], terms=terms,
                                    scale=max(abs(one[key]), math.log(config.vocab_size)), msg=key)
