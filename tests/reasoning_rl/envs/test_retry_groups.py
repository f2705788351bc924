"""Retry groups (task.episode.retry_groups): a group of episodes continues one failed first attempt,
so the group's advantages compare retries of the same failure; the shared attempt is context."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from benchmarks.config import EvalConfig, validate
from reasoning_rl.algo.advantages import grpo_advantages
from reasoning_rl.algo.groups import episode_fields
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.envs import EpisodeConfig, register_environment, unregister_environment
from reasoning_rl.envs.episode import EpisodeEngine, with_environment
from reasoning_rl.policy.engines import NativeEngine
from reasoning_rl.rollouts.sampling import SamplingConfig

from .conftest import ScriptedEngine
from .test_code_feedback import EXAMPLE, STUB, score
from .test_episode_cache import PROMPTS, Ragged, RaggedGreedy, assert_same_episodes, tiny

FEEDBACK = "# 0 of 3 tests passed\n# test 1: f(-7) returned -3, expected -4\n"
# First attempts of a group of 4 (wrong, right, wrong, right), then the retries of those still going.
SCRIPT = ["x + 4\n", "x + 3\n", "x * 2\n", "x + 3\n", "x + 3\n", "x - 1\n", "x + 3\n", "x + 4\n"]


def group_of_four(tokenizer, retry_groups: float, script=SCRIPT, seed=0):
    engine = ScriptedEngine(tokenizer, script)
    episodes = EpisodeEngine(engine, tokenizer, "code_feedback",
                             EpisodeConfig(max_turns=2, max_tokens=1000, retry_groups=retry_groups), [EXAMPLE])
    [group] = episodes.generate([STUB], 4, SamplingConfig(max_new_tokens=200), seed=seed)
    return engine, episodes, group


def test_a_retry_group_continues_the_first_failed_attempt_as_context(bpe_tokenizer):
    engine, episodes, group = group_of_four(bpe_tokenizer, 1.0)
    first, *_ = engine.sampled  # the group's first failed attempt, "x + 4"
    prompt = bpe_tokenizer(STUB, add_special_tokens=False)["input_ids"]
    observation = bpe_tokenizer(FEEDBACK + STUB, add_special_tokens=False)["input_ids"]
    shared = prompt + first + observation
    # Every episode's second turn was sampled from that one context, the right first attempts included.
    assert engine.contexts[4:] == [shared] * 4
    retries = engine.sampled[4:]
    for c, retry, text in zip(group, retries, ["x + 3\n", "x - 1\n", "x + 3\n", "x + 4\n"]):
        assert c.token_ids == first + observation + retry
        assert c.loss_mask == [0] * (len(first) + len(observation)) + [1] * len(retry)  # the retry alone is trained
        assert [(t.role, t.text, t.trained) for t in c.turns] == [
            ("sampled", "x + 4\n", False), ("observation", FEEDBACK + STUB, True), ("sampled", text, True)]
        assert c.text == text and c.reward_scale == 1.0
        # Behaviour log-probs as sampled on both attempts (the shared one's are its source's), NaN on the feedback.
        assert [math.isnan(lp) for lp in c.logprobs] == [False] * len(first) + [True] * len(observation) + [False] * len(retry)
        row = episode_fields(c)
        assert row["turns"][0]["trained"] is False and "trained" not in row["turns"][2]
        assert row["loss_mask_spans"] == [[len(c.token_ids) - len(retry), len(c.token_ids)]]
    # The verifier scores each retry: [1, 0, 1, 0], the worked example's advantages [+1, -1, +1, -1].
    rewards = torch.tensor([[score(c) for c in group]])
    assert rewards.tolist() == [[1.0, 0.0, 1.0, 0.0]]
    assert grpo_advantages(rewards, eps=0.0)[0].tolist() == [1.0, -1.0, 1.0, -1.0]  # exact in float32
    # Each episode has its own copy of the environment: one report per attempt it ran.
    metrics = episodes.pop_metrics()
    assert metrics["env/retry_group_fraction"] == 1.0
    assert metrics["env/tool_calls_mean"] == 2  # 4 first attempts and 4 retries were run


def test_without_retry_groups_each_episode_runs_on_its_own(bpe_tokenizer):
    engine, episodes, group = group_of_four(bpe_tokenizer, 0.0)
    assert [c.text for c in group] == ["x + 3\n", "x + 3\n", "x - 1\n", "x + 3\n"]  # two retries, two first passes
    assert [sum(t.role == "sampled" for t in c.turns) for c in group] == [2, 1, 2, 1]
    assert all(t.trained for c in group for t in c.turns)
    assert all(c.loss_mask[:len(s)] == [1] * len(s) for c, s in zip(group, engine.sampled))
    assert "env/retry_group_fraction" not in episodes.pop_metrics()


def test_a_group_whose_first_attempts_all_passed_stays_as_it_is(bpe_tokenizer):
    engine, episodes, group = group_of_four(bpe_tokenizer, 1.0, script=["x + 3\n"])
    assert len(engine.sampled) == 4 and all(c.loss_mask == [1] * len(c.token_ids) for c in group)
    assert episodes.pop_metrics()["env/retry_group_fraction"] == 0.0


def test_the_chance_is_drawn_per_group_from_the_seed(bpe_tokenizer):
    def shared(seed):
        engine = ScriptedEngine(bpe_tokenizer, ["x + 4\n"])  # every attempt fails: every group can share
        episodes = EpisodeEngine(engine, bpe_tokenizer, "code_feedback",
                                 EpisodeConfig(max_turns=2, max_tokens=1000, retry_groups=0.5), [EXAMPLE])
        groups = episodes.generate([STUB] * 40, 2, SamplingConfig(max_new_tokens=200), seed=seed)
        return [not g[0].turns[0].trained for g in groups], episodes.pop_metrics()["env/retry_group_fraction"]

    first, fraction = shared(5)
    assert shared(5)[0] == first  # the same seed shares the same groups
    assert shared(6)[0] != first
    assert fraction == sum(first) / 40 and 0.25 <= fraction <= 0.75


@pytest.fixture
def ragged_envs():
    register_environment("ragged_retry_test")(Ragged)
    register_environment("ragged_greedy_retry_test")(RaggedGreedy)
    yield
    unregister_environment("ragged_retry_test")
    unregister_environment("ragged_greedy_retry_test")


@pytest.mark.parametrize("do_sample", [True, False], ids=["sample", "greedy"])
def test_the_carried_cache_serves_a_retry_group_as_recomputing_does(ragged_envs, do_sample):
    """On the native engine the group's episodes take the source's keys and values (ContextCache.share):
    the same episodes as recomputing every context, and no episode prefills its context again."""
    model, tok = tiny()
    engine = NativeEngine(model, tok, batch_size=4)
    sampling = (SamplingConfig(max_new_tokens=10, temperature=1.2, top_k=40) if do_sample
                else SamplingConfig(max_new_tokens=10, do_sample=False))
    env = "ragged_retry_test" if do_sample else "ragged_greedy_retry_test"

    def run(cache):
        episodes = EpisodeEngine(engine, tok, env, EpisodeConfig(max_turns=3, max_tokens=60, cache=cache,
                                                                 retry_groups=1.0))
        flat = [c for g in episodes.generate(PROMPTS, 2, sampling, seed=11) for c in g]
        return flat, episodes.pop_metrics()

    (carried, carried_metrics), (recomputed, _) = run(True), run(False)
    assert_same_episodes(carried, recomputed, model.config)
    assert carried_metrics["env/retry_group_fraction"] > 0
    shared = [c for c in carried if not c.turns[0].trained]
    assert shared and all(c.loss_mask[:c.turns[0].end] == [0] * c.turns[0].end for c in shared)
    # A continued turn ran only the last sampled token and its observation, as without retry groups.
    continued = sum(t.end - t.start + 1 for c in carried for t in c.turns if t.role == "observation")
    prompts = sum(len(c.prompt_token_ids) for c in carried)
    assert carried_metrics["env/prefill_tokens_mean"] * len(carried) <= prompts + continued


def test_held_out_evaluation_runs_every_episode_whole(bpe_tokenizer):
    engine = ScriptedEngine(bpe_tokenizer, SCRIPT)
    task = SimpleNamespace(env="code_feedback", episode=EpisodeConfig(max_turns=2, retry_groups=0.5))
    evaluation, training = with_environment(task, bpe_tokenizer, engine, engine, [EXAMPLE])
    assert evaluation is not training and evaluation.inner is training.inner is engine
    assert training.episode.retry_groups == 0.5 and evaluation.episode.retry_groups == 0.0
    task.episode.retry_groups = 0.0
    evaluation, training = with_environment(task, bpe_tokenizer, engine, engine, [EXAMPLE])
    assert evaluation is training
    # reasoning-rl-eval refuses it, in one line.
    cfg = EvalConfig(benchmark="code_synthetic_feedback", model_name_or_path="m", env="code_feedback",
                     episode=EpisodeConfig(retry_groups=0.5))
    with pytest.raises(ConfigError, match=r"episode\.retry_groups=0\.5 shares first turns"):
        validate(cfg)


def test_fork_copies_an_episodes_state_and_shares_a_sandbox():
    from reasoning_rl.envs import get_environment

    feedback = get_environment("code_feedback")
    feedback.reset(EXAMPLE)
    feedback.step("x + 4\n")
    twin = feedback.fork()
    assert twin.reports == feedback.reports and twin.reports is not feedback.reports
    twin.step("x + 3\n")
    assert len(twin.reports) == 2 and len(feedback.reports) == 1
    sandbox = object()  # a handle that must not be copied
    tool = get_environment("python_tool", sandbox=sandbox)
    assert tool.fork()._sandbox is sandbox and tool.fork() is not tool
