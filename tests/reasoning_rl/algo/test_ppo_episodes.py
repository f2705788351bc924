"""PPO on multi-turn episodes: observation tokens (loss mask 0) are not actions.

GAE runs over the action positions alone, the score goes on the last action, and the value and
policy losses never read an observation position (reasoning_rl.algo.gae, reasoning_rl.algo.ppo)."""

from __future__ import annotations

import dataclasses
import math
import string

import pytest
import torch

from reasoning_rl.algo.batch import MaskedTokens
from reasoning_rl.algo.gae import gae_advantages, kl_penalized_rewards, last_action_index
from reasoning_rl.algo.losses import KLPenaltyConfig
from reasoning_rl.algo.ppo import PPOConfig, action_mask
from reasoning_rl.envs import Environment, StepResult, register_environment, unregister_environment
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trainer import Trainer
from rewards.specs import RewardSpec
from tests.reasoning_rl.conftest import _train, tiny_config
from tests.reasoning_rl.documented_metrics import METRICS_DOC, undocumented

# An episode: two sampled tokens, two observation tokens, one sampled token.
EPISODE = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])


# -- GAE over the action positions -----------------------------------------------------------------

def test_gae_with_observation_holes_equals_gae_on_the_actions_alone():
    # At the observation positions: rewards and values that must never be read.
    rewards = torch.tensor([[0.0, 0.0, 7.0, -7.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 9.0, 3.0, 0.4]])
    adv, ret = gae_advantages(rewards, values, EPISODE, gamma=0.9, lam=0.5)
    # The compressed action sequence: rewards [0, 0, 1], values [0.5, 0.2, 0.4].
    # delta = [0 + 0.9*0.2 - 0.5, 0 + 0.9*0.4 - 0.2, 1 - 0.4] = [-0.32, 0.16, 0.6]
    # (delta_1 bootstraps from V = 0.4 of the action after the observation, no discount for the observation)
    # gamma*lam = 0.45: A = [-0.32 + 0.45*0.43, 0.16 + 0.45*0.6, 0.6] = [-0.1265, 0.43, 0.6]
    assert adv[0].tolist() == pytest.approx([-0.1265, 0.43, 0.0, 0.0, 0.6])
    assert ret[0].tolist() == pytest.approx([-0.1265 + 0.5, 0.43 + 0.2, 0.0, 0.0, 0.6 + 0.4])
    actions = EPISODE[0].bool()
    c_adv, c_ret = gae_advantages(rewards[:, actions], values[:, actions], torch.ones(1, 3), gamma=0.9, lam=0.5)
    assert torch.equal(adv[:, actions], c_adv) and torch.equal(ret[:, actions], c_ret)


def test_gae_does_not_read_observation_positions():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 0.0, 0.0, 0.4]])
    base = gae_advantages(rewards, values, EPISODE, gamma=1.0, lam=0.95)
    garbage_v, garbage_r = values.clone(), rewards.clone()
    garbage_v[0, 2:4] = torch.tensor([1e6, math.nan])
    garbage_r[0, 2:4] = torch.tensor([-1e6, math.inf])
    other = gae_advantages(garbage_r, garbage_v, EPISODE, gamma=1.0, lam=0.95)
    assert all(torch.equal(a, b) for a, b in zip(base, other))


def test_the_score_goes_on_the_last_action_even_after_trailing_observations():
    # [action, action, obs, obs, action, obs, obs]: an episode cut by its budget inside an observation.
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    assert last_action_index(mask).tolist() == [4, 2]  # mask.sum() - 1 would be 2 (an observation) for row 0
    old = torch.tensor([[-1.0, -2.0, -5.0, -5.0, -0.5, -5.0, -5.0], [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0, 0.0, -0.5, 0.0, 0.0], [-1.0, -1.0, -2.0, 0.0, 0.0, 0.0, 0.0]])
    r = kl_penalized_rewards(old, ref, torch.tensor([1.0, 0.5]), mask, beta=0.1)
    # row 0: -0.1 * (old - ref) on actions = [-0.05, 0.1, ., ., 0]; + 1.0 on position 4; 0 on observations
    assert r[0].tolist() == pytest.approx([-0.05, 0.1, 0.0, 0.0, 1.0, 0.0, 0.0])
    # row 1 (single-turn, right-padded): -0.1 * [0, 0, 1] + 0.5 on position 2
    assert r[1].tolist() == pytest.approx([0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0])


def test_single_turn_rows_are_unchanged_bit_for_bit():
    """All-ones loss masks (and plain rows) give the right-padded mask and the last index mask.sum() - 1,
    exactly what the single-turn code computed before episodes were handled."""
    gen = torch.Generator().manual_seed(0)
    lengths = [5, 1, 3, 8, 2]
    rows = [list(range(n)) for n in lengths]
    width = max(lengths)
    before_mask = torch.zeros(len(rows), width)
    for i, n in enumerate(lengths):
        before_mask[i, :n] = torch.ones(n)
    assert torch.equal(action_mask(rows, width), before_mask)
    assert torch.equal(action_mask([MaskedTokens(r, [1] * len(r)) for r in rows], width), before_mask)
    old, ref = torch.randn(5, width, generator=gen), torch.randn(5, width, generator=gen)
    scores = torch.rand(5, generator=gen)
    before_last = (before_mask.sum(-1).long() - 1).clamp(min=0)
    assert torch.equal(last_action_index(before_mask), before_last)
    before_rewards = torch.where(before_mask.bool(), -0.04 * (old - ref), 0.0).scatter_add(
        1, before_last.unsqueeze(-1), scores.unsqueeze(-1))
    assert torch.equal(kl_penalized_rewards(old, ref, scores, before_mask, beta=0.04), before_rewards)


def test_action_mask_reads_the_episode_loss_mask():
    rows = [MaskedTokens([5, 6, 7, 8, 9], [1, 1, 0, 0, 1]), [3, 4]]
    assert action_mask(rows, 6).tolist() == [[1, 1, 0, 0, 1, 0], [1, 1, 0, 0, 0, 0]]


# -- a PPO step on episodes --------------------------------------------------------------------------

class Nudge(Environment):
    """Ends a turn at any digit or letter and answers " =": random tiny models make multi-turn episodes."""

    stop = tuple(string.ascii_letters + string.digits)

    def step(self, model_text: str) -> StepResult:
        return StepResult(observation=" =")


@pytest.fixture
def nudge_env():
    register_environment("nudge_ppo_test")(Nudge)
    yield "nudge_ppo_test"
    unregister_environment("nudge_ppo_test")


def _episode_cfg(env: str, steps: int = 2, **algo):
    cfg = tiny_config(steps=steps)
    cfg.task.env = env
    cfg.task.episode.max_turns = 3
    cfg.task.episode.max_tokens = 10
    cfg.rollout.max_new_tokens = 6
    # "has a digit" varies between samples of the untrained tiny model: advantages are not all 0.
    cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
    options = dict(prompts_per_step=6, group_size=1, micro_batch_size=4, learning_rate=1e-3, kl=KLPenaltyConfig(beta=0.04))
    options.update(algo)
    cfg.algo = PPOConfig(**options)
    return cfg


def test_ppo_trains_on_episodes(tmp_path, nudge_env):
    _train(_episode_cfg(nudge_env), tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert undocumented(metrics[0]) == [], f"document these in {METRICS_DOC}"
    for m in metrics:
        assert m["env/turns_mean"] > 1 and m["env/observation_tokens_mean"] > 0
        for key in ("loss/total", "loss/policy", "loss/value", "grad/norm", "grad/critic_norm", "ratio/mean"):
            assert math.isfinite(m[key]), key


def _garbage_at(t: torch.Tensor, where: torch.Tensor, value: float) -> torch.Tensor:
    return torch.where(where, torch.full_like(t, value), t)


def test_ppo_losses_ignore_observation_positions(tmp_path, nudge_env):
    """With learning rate 0 an update changes no weight, so two updates on the same rollouts log the same
    losses; garbage written at observation positions (values, returns, advantages, old log-probs) must
    leave both losses as they were, and the same garbage at action positions must not."""
    cfg = _episode_cfg(nudge_env, learning_rate=0.0, critic_learning_rate=0.0, num_iterations=1)
    cfg.evaluation.enabled = False
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer._setup_algorithm()
        ppo = trainer.algorithm
        ro = ppo.rollout(0)
        observations = torch.zeros_like(ro.mask, dtype=torch.bool)  # [N, L]
        for i, c in enumerate(ro.completions):
            if isinstance(c, MaskedTokens):
                observations[i, :len(c)] = torch.tensor(c.loss_mask) == 0
        assert observations.any(), "the toy environment should have written observation tokens"
        assert not (ro.mask.bool() & observations).any() and not (ro.value_mask.bool() & observations).any()
        assert (ro.advantages[observations] == 0).all() and (ro.returns[observations] == 0).all()
        assert ro.advantages.abs().sum() > 0
        base = ppo.update(ro)
        assert base["loss/value"] > 0 and base["loss/policy"] != 0
        # Garbage at observation positions: nothing moves.
        at_obs = dataclasses.replace(
            ro, old_values=_garbage_at(ro.old_values, observations, 50.0),
            returns=_garbage_at(ro.returns, observations, -50.0),
            advantages=_garbage_at(ro.advantages, observations, 1e3),
            old_logp=_garbage_at(ro.old_logp, observations, -30.0))
        same = ppo.update(at_obs)
        for key in ("loss/total", "loss/policy", "loss/value", "clip/value_fraction", "clip/low_fraction"):
            assert same[key] == base[key], key
        # The same garbage at the first action of every row moves both losses (the check above can fail).
        first = torch.zeros_like(observations)
        first[:, 0] = True
        at_actions = dataclasses.replace(ro, returns=_garbage_at(ro.returns, first, -50.0),
                                         advantages=_garbage_at(ro.advantages, first, 1e3))
        moved = ppo.update(at_actions)
        assert moved["loss/value"] != base["loss/value"] and moved["loss/policy"] != base["loss/policy"]
    finally:
        trainer.close()

