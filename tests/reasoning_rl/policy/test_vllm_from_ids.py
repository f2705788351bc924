"""The vLLM engines continue from token ids (``generate_from_ids``), which multi-turn episodes need:
the ids reach vLLM as they are, each row seeded like ``generate``'s prompts, stop strings cut as the
hf engines cut them, behaviour log-probs, finish reason and policy version kept, and an episode over
the engine. Fakes stand in for vLLM's ``LLM``; the real engine: tests/reasoning_rl/policy/test_vllm_engine.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from reasoning_rl.envs import EpisodeConfig
from reasoning_rl.envs.episode import EpisodeEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.vllm import (
    VLLMRolloutEngine,
    VLLMSampler,
    prefix_caching,
    prompt_seed,
)
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.tasks import Example
from tests.reasoning_rl.envs.conftest import build_bpe_tokenizer, char_ids
from tests.reasoning_rl.policy.test_vllm_rollout import FakeLLM


class ScriptedLLM:
    """vLLM's ``LLM.generate`` replaying scripted outputs: each request gets the next ``(text,
    finish_reason, num_cached_tokens)`` as character tokens, log-prob ``-0.1 * (k + 1)`` at position
    k; every prompt and ``SamplingParams`` it was given is kept."""

    def __init__(self, tokenizer, script) -> None:
        self.tokenizer, self.script = tokenizer, list(script)
        self.prompts, self.params = [], []

    def generate(self, prompts, params, use_tqdm=False):
        outs = []
        for prompt, param in zip(prompts, params, strict=True):
            self.prompts.append(prompt)
            self.params.append(param)
            text, reason, cached = self.script.pop(0)
            ids = char_ids(self.tokenizer, text)
            lps = [{t: SimpleNamespace(logprob=-0.1 * (k + 1))} for k, t in enumerate(ids)]
            outs.append(SimpleNamespace(num_cached_tokens=cached, outputs=[
                SimpleNamespace(token_ids=ids, finish_reason=reason, logprobs=lps)]))
        return outs


@pytest.fixture(scope="module")
def bpe():
    return build_bpe_tokenizer()


def test_the_ids_reach_vllm_unchanged_seeded_per_row(bpe):
    # Character tokens: a split the BPE never produces, so decode + encode would merge them.
    rows = [char_ids(bpe, "print(1)\n"), char_ids(bpe, "print")]
    assert bpe(bpe.decode(rows[1]), add_special_tokens=False)["input_ids"] != rows[1]
    llm = ScriptedLLM(bpe, [("45", "length", 0), ("6", "stop", 0)])
    sampler = VLLMSampler(llm, bpe, logprobs=True, sampling_params=SimpleNamespace)
    out = sampler.generate_from_ids(rows, SamplingConfig(max_new_tokens=2), seed=9)
    assert llm.prompts == [{"prompt_token_ids": rows[0]}, {"prompt_token_ids": rows[1]}]
    assert [p.n for p in llm.params] == [1, 1]
    assert [p.seed for p in llm.params] == [prompt_seed(9, 0), prompt_seed(9, 1)]  # as generate's prompts
    assert [c.prompt_token_ids for c in out] == rows
    assert [c.token_ids for c in out] == [char_ids(bpe, "45"), char_ids(bpe, "6")]
    assert [c.finish_reason for c in out] == ["length", "stop"]
    assert out[0].logprobs == pytest.approx([-0.1, -0.2])
    with pytest.raises(ValueError, match="at least one token"):
        sampler.generate_from_ids([[]], SamplingConfig())


def test_stop_strings_go_to_vllm_and_the_turn_is_cut_like_the_hf_engines(bpe):
    llm = ScriptedLLM(bpe, [("x = 1\n```output\nzz", "stop", 0)])
    sampler = VLLMSampler(llm, bpe, logprobs=True, sampling_params=SimpleNamespace)
    [c] = sampler.generate_from_ids([[5, 6]], SamplingConfig(max_new_tokens=20, stop=["```output"]), seed=0)
    assert llm.params[0].stop == ["```output"]  # vLLM draws nothing past the stop string
    # cut after the token that completes the stop string (kept), text before it
    assert c.token_ids == char_ids(bpe, "x = 1\n```output") and c.text == "x = 1\n"
    assert c.finish_reason == "stop" and len(c.logprobs) == len(c.token_ids)
    assert sampler.sampling_params(1, SamplingConfig(), None)["stop"] is None
    assert sampler.sampling_params(1, SamplingConfig(stop=["", "\n"]), None)["stop"] == ["\n"]  # as cut_at_stop


def test_the_rollout_engine_tags_versions_sleeps_and_measures_every_turn():
    torch.manual_seed(0)
    policy, tok = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))
    llm = FakeLLM(policy, tok)  # its own copy of the policy, as vLLM holds one
    engine = VLLMRolloutEngine(llm, tok, policy, sleep_mode=True, sampling_params=SimpleNamespace)
    engine.update_policy(policy, version=2)
    engine.pop_metrics()
    rows = [tok("3+4=", add_special_tokens=False)["input_ids"], tok("12*3=", add_special_tokens=False)["input_ids"]]
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=5)
    first = engine.generate_from_ids(rows, sampling, seed=1)
    second = engine.generate_from_ids([r + c.token_ids for r, c in zip(rows, first)], sampling, seed=2)
    assert {c.policy_version for c in first + second} == {2}
    assert all(len(c.logprobs) == len(c.token_ids) for c in first + second)
    # each turn: awake to sample, asleep after (the update gets the memory)
    assert llm.events[-5:] == ["generate", "sleep1", "wake", "generate", "sleep1"]
    metrics = engine.pop_metrics()
    assert metrics["rollout/logprob_mismatch_max"] < 1e-4  # synced weights: the trainer's numbers
    assert metrics["rollout/prefix_cache_hit_fraction"] == 0.0  # the fake caches nothing


def test_the_mismatch_and_the_prefix_cache_count_every_call_since_the_last_pop(bpe):
    # Two turns: 2 tokens off by 0.1 (max 0.2), then 1 token off by 0.4. Over the 3 tokens:
    # mean (2 * 0.1 + 1 * 0.4) / 3 = 0.2, max 0.4 (a turn alone would say 0.1 or 0.4).
    llm = ScriptedLLM(bpe, [("ab", "length", 4), ("c", "length", 0)])

    class Measured(VLLMRolloutEngine):
        said = iter([{"rollout/logprob_mismatch_mean": 0.1, "rollout/logprob_mismatch_max": 0.2},
                     {"rollout/logprob_mismatch_mean": 0.4, "rollout/logprob_mismatch_max": 0.4}])

        def measure_mismatch(self, completions, sampling):
            return next(self.said)

    llm.collective_rpc = None
    engine = Measured(llm, bpe, object(), sampling_params=SimpleNamespace)
    engine.generate_from_ids([[1, 2, 3, 4, 5]], SamplingConfig(), seed=0)
    engine.generate_from_ids([[1, 2, 3]], SamplingConfig(), seed=1)
    metrics = engine.pop_metrics()
    assert metrics["rollout/logprob_mismatch_mean"] == pytest.approx(0.2)
    assert metrics["rollout/logprob_mismatch_max"] == 0.4
    assert metrics["rollout/prefix_cache_hit_fraction"] == pytest.approx(4 / 8)  # 4 of 5 + 3 prompt tokens
    assert engine.pop_metrics() == {}


def test_an_episode_runs_on_the_vllm_engine_from_the_exact_ids(bpe):
    """The episode engine takes the vLLM engine (it continues from ids): each turn's prompt is the
    previous context's ids, the sampled character tokens kept although the BPE would merge them."""
    turns = [("```python\nprint(2 + 3)\n```\n```output", "stop", 0), ("The answer is 5.", "length", 0)]
    llm = ScriptedLLM(bpe, turns)
    sampler = VLLMSampler(llm, bpe, logprobs=True, sampling_params=SimpleNamespace)
    prompt = "What is 2 + 3? "
    episodes = EpisodeEngine(sampler, bpe, "python_tool", EpisodeConfig(max_turns=2, max_tokens=200),
                             [Example(id="t/1", prompt=prompt, reference="5", fields={})])
    [[c]] = episodes.generate([prompt], 1, SamplingConfig(max_new_tokens=60), seed=0)
    prompt_ids = bpe(prompt, add_special_tokens=False)["input_ids"]
    s0, s1 = char_ids(bpe, turns[0][0]), char_ids(bpe, turns[1][0])
    obs = c.token_ids[len(s0):len(c.token_ids) - len(s1)]
    assert c.token_ids == s0 + obs + s1 and c.loss_mask == [1] * len(s0) + [0] * len(obs) + [1] * len(s1)
    assert [p["prompt_token_ids"] for p in llm.prompts] == [prompt_ids, prompt_ids + s0 + obs]
    assert all(math.isnan(lp) for lp, m in zip(c.logprobs, c.loss_mask) if not m)
    assert "```output\n5\n```" in c.text


def test_prefix_caching_is_read_back_from_the_engine():
    cache = SimpleNamespace(enable_prefix_caching=True, block_size=128)
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache)))
    assert prefix_caching(llm) == {"prefix_caching": True, "block_size": 128}
    assert prefix_caching(object()) == {"prefix_caching": None, "block_size": None}
    assert "blocks of 128 tokens" in VLLMSampler(llm, None).context_cache_refusal()
