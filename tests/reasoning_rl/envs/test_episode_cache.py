"""The native engine's key/value cache carried across the turns of an episode
(reasoning_rl.policy.lean.context_cache): the same episodes as the recompute path, with less prefill."""

from __future__ import annotations

import string

import pytest
import torch

from reasoning_rl.envs import (
    Environment,
    EpisodeConfig,
    StepResult,
    register_environment,
    unregister_environment,
)
from reasoning_rl.envs.episode import EpisodeEngine
from reasoning_rl.policy.engines import HFEngine, NativeEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.runtime import decide_runtime, set_runtime
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.tasks import Example
from tests.reasoning_rl.conftest import assert_logprobs_close

PROMPTS = ["What is 3 + 4? Answer: ", "12 * 3 = ", "Add 5 and 9, then say done: "]


def tiny(arch: str = "llama", runtime: str = "lean"):
    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2,
                                                  intermediate_size=64))
    set_runtime(model, decide_runtime(model, runtime))
    return model, tok


class Ragged(Environment):
    """Ends a turn at any letter or digit; answers with an observation whose length depends on
    the turn's text (1 to 3 repeats of " ok #"); is done after 1 + len(prompt) % 3 answers, so the
    rows of a batch append different lengths and finish at different turns."""

    stop = tuple(string.ascii_letters + string.digits)

    def reset(self, example: Example) -> str:
        self.answers, self.done_after = 0, 1 + len(example.prompt) % 3
        return example.prompt

    def step(self, model_text: str) -> StepResult:
        self.answers += 1
        repeats = 1 + (len(model_text) + self.done_after + self.answers) % 3
        return StepResult(observation=" ok #" * repeats, done=self.answers >= self.done_after)


class RaggedGreedy(Ragged):
    """:class:`Ragged` whose turns also end at a space or '#', which the tiny model's greedy turns repeat."""

    stop = (*Ragged.stop, " ", "#")


@pytest.fixture
def ragged_env():
    register_environment("ragged_cache_test")(Ragged)
    register_environment("ragged_greedy_cache_test")(RaggedGreedy)
    yield "ragged_cache_test"
    unregister_environment("ragged_cache_test")
    unregister_environment("ragged_greedy_cache_test")


def run(engine, env: str, cache: bool, sampling: SamplingConfig, max_tokens: int = 60, metrics=None):
    episodes = EpisodeEngine(engine, engine.tokenizer, env, EpisodeConfig(max_turns=3, max_tokens=max_tokens,
                                                                          cache=cache))
    flat = [c for g in episodes.generate(PROMPTS, 2, sampling, seed=11) for c in g]
    if metrics is not None:
        metrics.update(episodes.pop_metrics())
    return flat


def assert_same_episodes(carried, recomputed, model_config):
    for a, b in zip(carried, recomputed, strict=True):
        assert a.token_ids == b.token_ids and a.loss_mask == b.loss_mask
        assert a.finish_reason == b.finish_reason
        # Other attention shapes (a carried cache against the whole context): the same sums, reordered.
        assert_logprobs_close(a.logprobs, b.logprobs, model_config)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("sampling", [SamplingConfig(max_new_tokens=10, temperature=1.2, top_k=40),
                                      SamplingConfig(max_new_tokens=10, do_sample=False)], ids=["sample", "greedy"])
@pytest.mark.numerics
def test_carried_cache_gives_the_recompute_paths_episodes(ragged_env, arch, sampling):
    model, tok = tiny(arch)
    # batch_size 4 < 6 rows: the rows are cut into batches, and as episodes finish the running rows
    # fall into other batches than the ones their cache was made in.
    engine = NativeEngine(model, tok, batch_size=4)
    caches = []
    open_cache = engine.context_cache
    engine.context_cache = lambda: caches.append(open_cache()) or caches[-1]
    env = ragged_env if sampling.do_sample else "ragged_greedy_cache_test"
    carried_metrics, recomputed_metrics = {}, {}
    carried = run(engine, env, True, sampling, metrics=carried_metrics)
    recomputed = run(engine, env, False, sampling, metrics=recomputed_metrics)
    assert_same_episodes(carried, recomputed, model.config)

    # The workload is what the test claims: 3 turns, observations of different lengths, episodes
    # ending at different turns.
    turns = [sum(t.role == "sampled" for t in c.turns) for c in carried]
    assert max(turns) == 3 and len(set(turns)) >= 2
    observations = {t.end - t.start for c in carried for t in c.turns if t.role == "observation"}
    assert len(observations) >= 2
    # And the cache did the work: a continued turn ran only the last sampled token and the
    # observation; the first turns' prompts were prefilled.
    [cache] = caches
    prompt_tokens = sum(len(c.prompt_token_ids) for c in carried)
    continued = sum(t.end - t.start for c in carried for t in c.turns if t.role == "observation")
    handed = sum(1 for c in carried for t in c.turns if t.role == "observation")
    assert cache.prefilled_tokens == prompt_tokens + continued + handed
    assert cache.reused_tokens > cache.prefilled_tokens - prompt_tokens
    # env/prefill_tokens_mean counts it; the recompute path ran every turn's whole context.
    assert carried_metrics["env/prefill_tokens_mean"] == cache.prefilled_tokens / 6
    whole = sum(len(c.prompt_token_ids) + t.start for c in recomputed for t in c.turns if t.role == "sampled")
    assert recomputed_metrics["env/prefill_tokens_mean"] == whole / 6


@pytest.mark.numerics
def test_an_episode_cut_by_its_budget_ends_the_same(ragged_env):
    model, tok = tiny()
    engine = NativeEngine(model, tok)
    sampling = SamplingConfig(max_new_tokens=10, temperature=1.2)
    carried, recomputed = (run(engine, ragged_env, cache, sampling, max_tokens=22) for cache in (True, False))
    assert_same_episodes(carried, recomputed, model.config)
    assert any(len(c.token_ids) == 22 and c.finish_reason == "length" for c in carried)


@pytest.mark.numerics
def test_generate_from_ids_continues_each_row_by_its_key():
    model, tok = tiny("qwen2")
    engine = NativeEngine(model, tok)
    sampling = SamplingConfig(max_new_tokens=6, temperature=1.0)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    cache = engine.context_cache()
    first = engine.generate_from_ids(ids, sampling, seed=3, cache=cache, keys=["a", "b", "c"])
    # Kept: the context and the new tokens but the last (drawn, never run).
    assert [cache.rows[k].ids for k in "abc"] == [r + c.token_ids[:-1] for r, c in zip(ids, first)]
    assert [cache.rows[k].kv.shape[3] for k in "abc"] == [len(r) + len(c.token_ids) - 1 for r, c in zip(ids, first)]
    # Row a appends 1 token, row b 7, row c is a new context under its key (recomputed), and a key
    # the cache has never seen ("d") starts from nothing.
    rows = [ids[0] + first[0].token_ids + [5], ids[1] + first[1].token_ids + [7, 8, 9, 10, 11, 12, 13],
            ids[2][:4], ids[0]]
    reused = cache.reused_tokens
    carried = engine.generate_from_ids(rows, sampling, seed=4, cache=cache, keys=["a", "b", "c", "d"])
    recomputed = engine.generate_from_ids(rows, sampling, seed=4)
    assert [c.token_ids for c in carried] == [c.token_ids for c in recomputed]
    for a, b in zip(carried, recomputed):
        assert_logprobs_close(a.logprobs, b.logprobs, model.config)
    # a and b reused everything but their last sampled token and what was appended.
    assert cache.reused_tokens - reused == len(rows[0]) - 2 + len(rows[1]) - 8
    assert sorted(cache.rows) == ["a", "b", "c", "d"]  # this call's rows, and only them
    # An entry of other weights is not used: the policy version is part of it.
    engine.update_policy(model, 1)
    assert cache.usable("a", rows[0] + carried[0].token_ids, 1) is None
    assert cache.usable("a", rows[0] + carried[0].token_ids, 0) is not None
    with pytest.raises(ValueError, match="one key per row"):
        engine.generate_from_ids(rows, sampling, cache=cache)


def test_engines_that_cannot_carry_a_cache_recompute(ragged_env):
    model, tok = tiny()
    assert NativeEngine(model, tok, lean=False).context_cache() is None
    assert "lean=False" in NativeEngine(model, tok, lean=False).context_cache_refusal()
    modules, tok = tiny(runtime="hf")
    assert "own modules" in NativeEngine(modules, tok).context_cache_refusal()
    sampling = SamplingConfig(max_new_tokens=10, temperature=1.2)
    # The hf engine has no cache to carry: with the switch on it runs the recompute path.
    hf = HFEngine(model, tok)
    assert_same_episodes(run(hf, ragged_env, True, sampling), run(hf, ragged_env, False, sampling), model.config)
