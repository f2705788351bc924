"""code_feedback episodes on hand cases (a scripted policy, the real sandbox): a wrong then a right
attempt, all wrong, the budget cut, hostile code contained; the reward is the code verifier on the
final attempt, discounted per attempt; the warm-start episodes show the environment's own feedback."""

from __future__ import annotations

import pytest

import rewards
from reasoning_rl.algo.groups import episode_fields
from reasoning_rl.envs import EpisodeConfig, get_environment
from reasoning_rl.envs.episode import EpisodeEngine
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.tasks import Example
from reasoning_rl.tasks.code_synthetic_feedback import make_feedback_dataset, retry_episode

from .conftest import ScriptedEngine

STUB = 'def f(x):\n    """Return x plus 3."""\n    return '
CHECK = ("def check(candidate):\n    assert candidate(-7) == -4\n    assert candidate(0) == 3\n"
         "    assert candidate(8) == 11\n")
EXAMPLE = Example(id="cs/add/3", prompt=STUB, reference="x + 3",
                  fields={"prompt": STUB, "test": CHECK, "entry_point": "f"})
VERIFIER = rewards.get_verifier("code", extract="raw", partial_credit=True)


def episode(tokenizer, turns, **episode):
    options = episode.pop("options", {})
    engine = ScriptedEngine(tokenizer, turns)
    episodes = EpisodeEngine(engine, tokenizer, "code_feedback", EpisodeConfig(options=options, **episode), [EXAMPLE])
    [[c]] = episodes.generate([STUB], 1, SamplingConfig(max_new_tokens=200), seed=0)
    return engine, episodes, c


def score(c) -> float:
    return VERIFIER(c.text, EXAMPLE.reference, **EXAMPLE.fields).score


def test_a_wrong_then_a_right_attempt(bpe_tokenizer):
    engine, episodes, c = episode(bpe_tokenizer, ["x + 4\n", "x + 3\n"], max_turns=3, max_tokens=1000,
                                  options={"attempt_discount": 0.5})
    feedback = "# 0 of 3 tests passed\n# test 1: f(-7) returned -3, expected -4\n"
    assert [(t.role, t.text) for t in c.turns] == [("sampled", "x + 4\n"), ("observation", feedback + STUB),
                                                   ("sampled", "x + 3\n")]
    assert c.finish_reason == "stop"  # every test passed: the environment ended the episode
    assert c.turns[0].tool == "error" and c.turns[2].tool == "ok" and c.turns[2].reward == 1.0
    # The verifier scores the final attempt alone; the whole episode is in the turns.
    assert c.text == "x + 3\n" and score(c) == 1.0
    assert "".join(t.text for t in c.turns) == "x + 4\n" + feedback + STUB + "x + 3\n"
    assert c.reward_scale == 0.5  # attempt_discount ** (2 attempts - 1)
    # The loss trains on the two attempts only; the row names the spans.
    s0, s1 = engine.sampled
    assert c.loss_mask == [1] * len(s0) + [0] * (len(c.token_ids) - len(s0) - len(s1)) + [1] * len(s1)
    row = episode_fields(c)
    assert row["loss_mask_spans"] == [[0, len(s0)], [len(c.token_ids) - len(s1), len(c.token_ids)]]
    assert [t["tokens"] for t in row["turns"]] == [[0, len(s0)], [len(s0), len(c.token_ids) - len(s1)],
                                                   [len(c.token_ids) - len(s1), len(c.token_ids)]]
    metrics = episodes.pop_metrics()
    assert metrics["env/turns_mean"] == 2 and metrics["env/tool_calls_mean"] == 2
    assert metrics["env/tool_error_rate"] == 0.5  # one failed attempt of two run


def test_a_right_first_attempt_ends_at_once_and_is_not_discounted(bpe_tokenizer):
    _, _, c = episode(bpe_tokenizer, ["x + 3\n", "never sampled\n"], max_turns=3, max_tokens=1000,
                      options={"attempt_discount": 0.5})
    assert [t.text for t in c.turns] == ["x + 3\n"] and c.reward_scale == 1.0 and score(c) == 1.0


def test_all_wrong_ends_at_the_turn_limit_with_the_last_attempt_scored(bpe_tokenizer):
    _, episodes, c = episode(bpe_tokenizer, ["x + 4\n", "3 - x\n"], max_turns=2, max_tokens=1000)
    assert [t.role for t in c.turns] == ["sampled", "observation", "sampled"]
    assert c.finish_reason == "length"
    assert episodes.pop_metrics()["env/turn_limit_fraction"] == 1.0
    # The last attempt 3 - x passes f(0) == 3 only (f(-7) = 10, f(8) = -5): 1/3, not attempt 1's 0/3.
    assert score(c) == pytest.approx(1 / 3)
    # The hidden test source never reaches the policy: only calls, values and counts.
    observation = c.turns[1].text
    assert "assert" not in observation and "candidate" not in observation and "check" not in observation


def test_an_attempt_that_ends_with_eos_is_the_final_one(bpe_tokenizer):
    _, _, c = episode(bpe_tokenizer, ["x + 4<eos>"], max_turns=3, max_tokens=1000)
    assert [t.role for t in c.turns] == ["sampled"] and c.finish_reason == "stop" and score(c) == 0.0


def test_the_budget_cuts_an_episode_cleanly(bpe_tokenizer):
    # 6 sampled tokens, then the observation (far longer) is cut at the 20-token budget.
    engine, episodes, c = episode(bpe_tokenizer, ["x + 4\n", "x + 3\n"], max_turns=3, max_tokens=20)
    assert len(c.token_ids) == 20 and c.finish_reason == "length"
    assert [t.role for t in c.turns] == ["sampled", "observation"] and len(engine.sampled) == 1
    assert episodes.pop_metrics()["env/budget_cut_fraction"] == 1.0
    assert score(c) == 0.0  # the final attempt is the first one


def test_hostile_attempts_are_contained_and_the_episode_goes_on(bpe_tokenizer, tmp_path):
    target = tmp_path / "pwned"
    hostile = f"open({str(target)!r}, 'w').write('x') or x + 3\n"
    _, episodes, c = episode(bpe_tokenizer, [hostile, "[0 for _ in iter(int, 1)]\n", "x + 3\n"], max_turns=3,
                             max_tokens=2000, options={"timeout": 1})
    assert not target.exists()  # the jail's filesystem is not this one
    assert [t.tool for t in c.turns if t.role == "sampled"] == ["error", "timeout", "ok"]
    assert "the program ran past 1 s and was killed" in c.turns[3].text
    assert c.finish_reason == "stop" and score(c) == 1.0
    assert episodes.pop_metrics()["env/tool_timeouts"] == 1


def test_options_are_checked():
    with pytest.raises(ValueError, match="attempt_discount must be in"):
        get_environment("code_feedback", attempt_discount=0)
    with pytest.raises(ValueError, match="extract must be one of"):
        get_environment("code_feedback", extract="python")


def test_warm_start_episodes_show_the_environments_own_feedback():
    rows = make_feedback_dataset(40, 0, "train", retry_fraction=0.5)
    retries = [r for r in rows if r["episode"] != r["solution"] + "\n"]
    assert 10 <= len(retries) <= 30  # about half
    import random

    for retry_prompt in ("full", "last_line"):
        env = get_environment("code_feedback", retry_prompt=retry_prompt)
        for row in retries[:3]:
            text = retry_episode(row, random.Random(1), retry_prompt=retry_prompt)
            wrong, rest = text.split("\n", 1)
            env.reset(Example(row["id"], row["prompt"], row["solution"],
                              {k: row[k] for k in ("prompt", "test", "entry_point")}))
            step = env.step(wrong)  # the sandbox's feedback for the same wrong attempt
            assert rest == step.observation + row["solution"] + "\n"
    assert step.observation.endswith("\n    return ")  # last_line: the stub's open line only


def test_the_training_reward_is_the_final_attempts_score_times_the_discount(bpe_tokenizer, tmp_path):
    from types import SimpleNamespace

    from reasoning_rl.algo.groups import completion_rows, sample_and_score
    from reasoning_rl.reward_guard import RewardGuard
    from rewards.compose import CompositeReward
    from rewards.specs import RewardSpec

    engine = EpisodeEngine(ScriptedEngine(bpe_tokenizer, ["x + 4\n", "x + 3\n"]), bpe_tokenizer, "code_feedback",
                           EpisodeConfig(max_turns=2, max_tokens=1000, options={"attempt_discount": 0.8}), [EXAMPLE])
    ctx = SimpleNamespace(engine=engine, sampling=SamplingConfig(max_new_tokens=40), pool=None, run_dir=tmp_path,
                          reward_guard=RewardGuard(),
                          reward=CompositeReward([RewardSpec("code", options={"extract": "raw", "partial_credit": True})]),
                          cfg=SimpleNamespace(rollout=SimpleNamespace(reward_timeout=20), task=SimpleNamespace(audit=None)))
    groups = sample_and_score(ctx, [EXAMPLE], 1, seed=0)
    # The verifier gives the final attempt 1.0; two attempts: 1.0 * 0.8 ** (2 - 1).
    assert groups.component_scores["code"] == [1.0]
    assert groups.rewards.tolist() == [[pytest.approx(0.8)]]
    [row] = completion_rows(groups)
    assert row["completion"] == "x + 3\n" and row["reward"] == pytest.approx(0.8) and row["reward_scale"] == 0.8
    assert [t["role"] for t in row["turns"]] == ["sampled", "observation", "sampled"]
    assert row["turns"][0]["tool"] == "error" and row["turns"][2]["step_reward"] == 1.0
