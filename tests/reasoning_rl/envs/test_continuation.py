"""The hf and native engines continue from token ids (``generate_from_ids``), which episodes need,
and a whole episode over a real engine keeps each turn's ids and log-probs as the engine sampled them."""

from __future__ import annotations

import string

import pytest

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
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from tests.reasoning_rl.conftest import assert_logprobs_close

PROMPTS = ["What is 3 + 4? Answer: ", "12 * 3 = "]


@pytest.fixture(scope="module")
def tiny():
    import torch

    torch.manual_seed(0)
    return build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))


@pytest.mark.numerics
@pytest.mark.parametrize("engine_cls", [HFEngine, NativeEngine])
@pytest.mark.parametrize("do_sample", [False, True])
def test_ids_continue_like_the_text_prompt(tiny, engine_cls, do_sample):
    model, tok = tiny
    engine = engine_cls(model, tok)
    sampling = SamplingConfig(max_new_tokens=8, do_sample=do_sample)
    from_text = [g[0] for g in engine.generate(PROMPTS, 1, sampling, seed=5)]
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    from_ids = engine.generate_from_ids(ids, sampling, seed=5)
    assert [c.token_ids for c in from_ids] == [c.token_ids for c in from_text]
    assert [c.prompt_token_ids for c in from_ids] == ids
    for a, b in zip(from_ids, from_text):
        assert_logprobs_close(a.logprobs, b.logprobs, model.config)  # ids or text: the same forward
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate_from_ids([[]], sampling)


class EveryChar(Environment):
    """Ends a turn at any letter or digit and answers with a fixed observation."""

    stop = tuple(string.ascii_letters + string.digits)

    def step(self, model_text: str) -> StepResult:
        return StepResult(observation=" ok ")


class Recorder:
    def __init__(self, inner):
        self.inner, self.turns = inner, []
        self.policy_version = 0

    def generate_from_ids(self, prompt_ids, sampling, seed=None):
        out = self.inner.generate_from_ids(prompt_ids, sampling, seed=seed)
        self.turns.append(out)
        return out


@pytest.mark.parametrize("engine_cls", [HFEngine, NativeEngine])
def test_episode_over_a_real_engine(tiny, engine_cls):
    model, tok = tiny
    register_environment("every_char_test")(EveryChar)
    try:
        rec = Recorder(engine_cls(model, tok))
        episodes = EpisodeEngine(rec, tok, "every_char_test", EpisodeConfig(max_turns=3, max_tokens=40))
        groups = episodes.generate(PROMPTS, 2, SamplingConfig(max_new_tokens=10), seed=1)
    finally:
        unregister_environment("every_char_test")
    flat = [c for g in groups for c in g]
    obs = tok(" ok ", add_special_tokens=False)["input_ids"]
    # Rebuild each episode from what the engine returned turn by turn: sampled ids (and their
    # log-probs) in order, the observation's ids between turns, nothing else.
    running = list(range(len(flat)))
    expected = {i: ([], [], []) for i in running}
    for turn in rec.turns:
        assert len(turn) == len(running)
        for i, c in zip(running, turn):
            ids, mask, lps = expected[i]
            ids += c.token_ids
            mask += [1] * len(c.token_ids)
            lps += c.logprobs
            if flat[i].token_ids[len(ids):len(ids) + len(obs)] == obs:
                ids += obs
                mask += [0] * len(obs)
        running = [i for i in running if len(expected[i][0]) < len(flat[i].token_ids)]
    for i, c in enumerate(flat):
        ids, mask, lps = expected[i]
        assert c.token_ids == ids and c.loss_mask == mask
        assert [lp for lp, m in zip(c.logprobs, c.loss_mask) if m] == pytest.approx(lps)
        assert len(c.token_ids) <= 40
    assert len(rec.turns) >= 2  # the stop strings made the episodes multi-turn
