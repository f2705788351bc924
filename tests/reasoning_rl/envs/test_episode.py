"""Multi-turn episodes: the sampled ids reach the loss unchanged, observations are masked out,
the budget ends an episode cleanly, hostile tool code is contained."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from reasoning_rl.algo.batch import MaskedTokens, training_rows
from reasoning_rl.batching import pack
from reasoning_rl.envs import EpisodeConfig
from reasoning_rl.envs.episode import EngineCannotContinueError, EpisodeEngine
from reasoning_rl.envs.python_tool import CUT_MARKER
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.tasks import Example

from .conftest import ScriptedEngine, char_ids

TURNS = [
    "```python\nprint(123 * 456)\n```\n```output",
    "```python\nprint(1 + 1)\n```\n```output",
    "The answer is 56088.<eos>",
]
PROMPT = "What is 123 * 456? "


def run_episode(tokenizer, turns, **episode):
    engine = ScriptedEngine(tokenizer, turns)
    ex = Example(id="t/1", prompt=PROMPT, reference="56088", fields={})
    episodes = EpisodeEngine(engine, tokenizer, "python_tool", EpisodeConfig(**episode), [ex])
    [[c]] = episodes.generate([PROMPT], 1, SamplingConfig(max_new_tokens=64), seed=0)
    return engine, episodes, c


def test_three_turns_keep_the_sampled_ids_and_mask_only_them(bpe_tokenizer):
    engine, episodes, c = run_episode(bpe_tokenizer, TURNS, max_turns=3, max_tokens=1000)
    # The tokenizer is one where decode/re-encode changes ids: the character tokens of a turn
    # re-encode to fewer, merged ids.
    first = engine.sampled[0]
    assert bpe_tokenizer(bpe_tokenizer.decode(first), add_special_tokens=False)["input_ids"] != first
    obs = [bpe_tokenizer(o, add_special_tokens=False)["input_ids"] for o in ("\n56088\n```\n", "\n2\n```\n")]
    s0, s1, s2 = engine.sampled
    assert c.token_ids == s0 + obs[0] + s1 + obs[1] + s2
    assert c.loss_mask == [1] * len(s0) + [0] * len(obs[0]) + [1] * len(s1) + [0] * len(obs[1]) + [1] * len(s2)
    assert c.finish_reason == "stop" and c.token_ids[-1] == bpe_tokenizer.eos_token_id
    # Each turn continued from exactly the previous context's ids (nothing re-tokenized).
    prompt = bpe_tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    assert engine.contexts == [prompt, prompt + s0 + obs[0], prompt + s0 + obs[0] + s1 + obs[1]]
    assert c.text == ("```python\nprint(123 * 456)\n```\n```output\n56088\n```\n"
                      "```python\nprint(1 + 1)\n```\n```output\n2\n```\nThe answer is 56088.")
    # Behaviour log-probs as sampled on the model's tokens, NaN on the observations.
    sampled_lp = [lp for lp, m in zip(c.logprobs, c.loss_mask) if m]
    assert sampled_lp == pytest.approx([-0.5 - 0.01 * k for s in (s0, s1, s2) for k in range(len(s))])
    assert all(math.isnan(lp) for lp, m in zip(c.logprobs, c.loss_mask) if not m)

    # Through the trainer's rows and packing: the completion mask is the loss mask, the ids unchanged.
    rows = training_rows(SimpleNamespace(completions=[c]), bpe_tokenizer.eos_token_id)
    assert isinstance(rows.completions[0], MaskedTokens)
    assert rows.lengths() == [len(s0) + len(s1) + len(s2)]  # the loss's denominators count sampled tokens
    packed = pack(rows.prompts, rows.completions, bpe_tokenizer.pad_token_id)
    width = packed.completion_start
    assert packed.input_ids[0, width:].tolist() == c.token_ids
    assert packed.completion_mask[0].tolist() == [float(m) for m in c.loss_mask]
    trained = packed.input_ids[0, width:][packed.completion_mask[0].bool()].tolist()
    assert trained == s0 + s1 + s2  # exactly the sampled ids, in order

    metrics = episodes.pop_metrics()
    assert metrics["env/turns_mean"] == 3 and metrics["env/tool_calls_mean"] == 2
    assert metrics["env/tool_error_rate"] == 0 and metrics["env/observation_tokens_mean"] == len(obs[0] + obs[1])
    assert metrics["env/budget_cut_fraction"] == 0
    assert episodes.pop_metrics() == {}  # counts start again after each pop


def test_single_turn_rows_are_unchanged():
    rows = training_rows(SimpleNamespace(completions=[SimpleNamespace(prompt_token_ids=[5], token_ids=[7, 8],
                                                                      loss_mask=None)]), eos_token_id=0)
    assert type(rows.completions[0]) is list and rows.lengths() == [2]
    assert pack(rows.prompts, rows.completions, 0).completion_mask.tolist() == [[1.0, 1.0]]


def test_an_episode_over_the_budget_ends_cleanly(bpe_tokenizer):
    prompt_len = len(bpe_tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    turn = len(char_ids(bpe_tokenizer, TURNS[0]))
    budget = turn + 3  # the first observation does not fit: it is cut to 3 tokens, then the episode ends
    engine, episodes, c = run_episode(bpe_tokenizer, TURNS, max_turns=3, max_tokens=budget)
    assert c.finish_reason == "length" and len(c.token_ids) == budget
    assert c.loss_mask == [1] * turn + [0] * 3
    assert len(engine.contexts) == 1  # no second turn was sampled
    assert len(c.prompt_token_ids) == prompt_len
    assert episodes.pop_metrics()["env/budget_cut_fraction"] == 1.0

    # A budget smaller than one turn cuts the turn itself.
    engine, episodes, c = run_episode(bpe_tokenizer, TURNS, max_turns=3, max_tokens=5)
    assert c.finish_reason == "length" and c.token_ids == engine.sampled[0][:5] and c.loss_mask == [1] * 5


def test_a_tool_call_without_turns_left_ends_the_episode_as_cut(bpe_tokenizer):
    _, episodes, c = run_episode(bpe_tokenizer, TURNS, max_turns=1, max_tokens=1000)
    assert c.finish_reason == "length" and all(c.loss_mask)
    assert episodes.pop_metrics()["env/turn_limit_fraction"] == 1.0


def test_hostile_code_inside_an_episode_is_contained(bpe_tokenizer):
    from rewards.code.hostile import CASES, Context

    cases = {c.name: c for c in CASES}
    ctx = Context()
    programs = {
        "write_outside_tmp": cases["write_outside_tmp"].program(ctx) + "print(f())\n",
        "infinite_loop": cases["infinite_loop"].program(ctx) + "f()\n",
        "output_flood": cases["output_flood"].program(ctx),
    }
    for name, program in programs.items():
        turns = [f"```python\n{program}```\n```output", "Done.<eos>"]
        engine = ScriptedEngine(bpe_tokenizer, turns)
        episodes = EpisodeEngine(engine, bpe_tokenizer, "python_tool",
                                 EpisodeConfig(max_turns=2, max_tokens=100_000, options={"timeout": 1.0}))
        [[c]] = episodes.generate([PROMPT], 1, SamplingConfig(max_new_tokens=100_000))
        metrics = episodes.pop_metrics()
        assert c.finish_reason == "stop", name  # the episode went on after the tool call
        if name == "write_outside_tmp":
            assert not any(p.exists() for p in ctx.outside_paths())
            assert "\n0\n" in c.text  # no write outside the jail succeeded
        if name == "infinite_loop":
            assert metrics["env/tool_timeouts"] == 1 and "TimeoutError" in c.text
        if name == "output_flood":
            # The sandbox keeps a 2,000-byte tail; the observation keeps 400 characters and says so.
            cut = len(c.text.split("```output\n")[1].split(CUT_MARKER.format(n=0)[:5])[0])
            assert cut == 400 and "more characters cut]" in c.text


def test_an_engine_without_continuation_is_refused(bpe_tokenizer):
    class SingleTurn:
        def generate(self, prompts, n, sampling, seed=None):
            return []

    with pytest.raises(EngineCannotContinueError, match=r"rollout\.backend=hf"):
        EpisodeEngine(SingleTurn(), bpe_tokenizer, "python_tool", EpisodeConfig())


def test_the_loss_ignores_observation_tokens():
    """GRPO's loss on a row whose observation tokens have wild log-probs equals the loss on the
    sampled tokens alone: the mask removes them from every sum and denominator."""
    from reasoning_rl.algo.aggregation import LossNormalizer
    from reasoning_rl.algo.losses import KLConfig, LossGroups, PolicyLossConfig, grpo_loss

    logp = torch.tensor([[-1.0, -50.0, -2.0, -3.0]], requires_grad=True)  # [1, 4]; token 1 is an observation
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    adv = torch.tensor([1.0])
    out = grpo_loss(logp, logp.detach() - 0.1, None, adv, mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2), kl=KLConfig(beta=0.0),
                               aggregation="token_mean"), normalizer=LossNormalizer.for_batch([3]))
    out.loss.backward()
    assert logp.grad[0, 1] == 0.0 and (logp.grad[0, [0, 2, 3]] != 0).all()
