"""A run whose verifier fails stops with one line naming it (reasoning_rl.reward_guard) instead of
finishing with 0.0% accuracy; below the limit it warns once, and the held-out table says what was not scored."""

import json
import logging

import pytest

from reasoning_rl.cli import format_eval_table
from reasoning_rl.reward_guard import TRAINING, BrokenRewardError, RewardGuard
from rewards import register_verifier
from rewards.batch import BatchScores
from rewards.registry import unregister_verifier
from rewards.types import VerifierResult
from tests.reasoning_rl.conftest import _train, tiny_config


def _batch(ok: int, error: int = 0, timeout: int = 0, unscorable: int = 0) -> BatchScores:
    results = ([VerifierResult.ok(1.0)] * ok + [VerifierResult.error("ValueError: boom")] * error
               + [VerifierResult.timeout(1.0)] * timeout + [VerifierResult.unscorable("no reference")] * unscorable)
    return BatchScores(results=results, num_timeouts=timeout, num_errors=error, num_unscorable=unscorable, seconds=0.0)


def test_a_batch_that_fails_entirely_stops_at_once_naming_verifier_count_and_first_error():
    guard = RewardGuard(max_failed_share=0.5, window=10)
    with pytest.raises(BrokenRewardError) as info:
        guard.observe(TRAINING, {"math": _batch(0, error=8)})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("verifier math failed on every item of a training step (error=8 of 8; first: "
                              "ValueError: boom)")


def test_the_failed_share_is_judged_over_the_window_and_each_verifier_on_its_own():
    guard = RewardGuard(max_failed_share=0.5, window=3)
    for _ in range(2):  # 75% failed, but the window is not full yet: no decision on two steps
        guard.observe(TRAINING, {"math": _batch(2, error=6), "format": _batch(8)})
    with pytest.raises(BrokenRewardError, match=r"verifier math failed on 18 of 24 items \(75%\) over the last 3 "
                                                r"training steps, more than trainer.max_failed_reward_share=0.5"):
        guard.observe(TRAINING, {"format": _batch(8), "math": _batch(2, error=6)})


def test_a_share_at_the_limit_runs_on_and_warns_once(caplog):
    guard = RewardGuard(max_failed_share=0.5, window=2)
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.reward_guard"):
        for _ in range(5):
            guard.observe(TRAINING, {"math": _batch(4, error=4)})
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("verifier math failed on 4 of 8 items of a training step (error=4; first: "
                                  "ValueError: boom)")


def test_unscorable_items_never_stop_a_run():
    # The code verifier's "no code found in the completion": what an untrained policy gets on every item.
    guard = RewardGuard(max_failed_share=0.5, window=1)
    for _ in range(3):
        guard.observe(TRAINING, {"code": _batch(0, unscorable=8)})
    guard.observe("held-out evaluation", {"code": _batch(0, unscorable=8)})


def test_an_evaluation_is_its_own_window_and_the_first_timeout_is_named(caplog):
    guard = RewardGuard(max_failed_share=0.5, window=10)
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.reward_guard"):
        guard.observe("held-out evaluation", {"math": _batch(3, timeout=1)})
        with pytest.raises(BrokenRewardError, match="over a held-out evaluation"):
            guard.observe("held-out evaluation", {"math": _batch(1, timeout=3)})
    timeouts = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert timeouts == ["verifier math timed out on 1 of 4 items of a held-out evaluation (each killed after "
                        "rollout.reward_timeout); a verifier that hangs costs that much wall time per item"]


def test_the_held_out_table_says_what_was_not_scored():
    before = {"greedy_accuracy": 0.0, "sampled_accuracy": 0.25, "num_problems": 4, "samples_per_problem": 2,
              "not_scored/greedy/error": 3}
    after = {**before, "not_scored/greedy/error": 1, "not_scored/sampled/timeout": 2}
    table = format_eval_table({"eval_before": before, "eval_after": after, "label": "GRPO"})
    assert "| greedy | 0.0% (not scored: error=3) | 0.0% (not scored: error=1) | +0.0% |" in table
    assert "| sampled (n=2) | 25.0% | 25.0% (not scored: timeout=2) | +0.0% |" in table


# -- real runs: verifiers run in reward workers, so these are module-level (picklable by reference) ------------
def always_raises(completion: str, reference: object, **fields: object) -> float:
    raise ValueError("the plugin cannot parse this")


def raises_on_odd_lengths(completion: str, reference: object, **fields: object) -> float:
    if len(completion) % 2:
        raise ValueError("odd")
    return 0.0


@pytest.fixture
def plugin_verifiers():
    names = {"test_always_raises": always_raises, "test_raises_on_odd": raises_on_odd_lengths}
    for name, fn in names.items():
        register_verifier(name)(fn)
    yield
    for name in names:
        unregister_verifier(name)


def test_a_verifier_that_raises_on_every_call_stops_the_first_training_step(tmp_path, plugin_verifiers):
    cfg = tiny_config(steps=2)
    cfg.task.rewards = [{"name": "math"}, {"name": "test_always_raises"}]
    with pytest.raises(BrokenRewardError) as info:
        _train(cfg, tmp_path / "run")
    assert str(info.value).startswith("verifier test_always_raises failed on every item of a training step "
                                      "(error=8 of 8; first: ValueError: the plugin cannot parse this)")
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or not metrics.read_text().strip()  # nothing trained on the zeros


def test_a_verifier_failing_on_some_items_warns_and_the_run_finishes(tmp_path, plugin_verifiers, caplog):
    cfg = tiny_config(steps=2)
    cfg.task.rewards = [{"name": "math"}, {"name": "test_raises_on_odd"}]
    cfg.trainer.max_failed_reward_share = 1.0  # every share below "all" is tolerated
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.reward_guard"):
        _, summary = _train(cfg, tmp_path / "run")
    assert summary["eval_after"]["num_problems"] == 8
    warned = [r.getMessage() for r in caplog.records if "test_raises_on_odd" in r.getMessage()]
    assert len(warned) <= 1  # once, or never when no completion of these two steps had an odd length
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert bool(warned) == any(m["verifier/errors"] for m in metrics)
