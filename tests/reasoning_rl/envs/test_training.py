"""GRPO on multi-turn episodes end to end (tiny model, CPU, 2 steps): observations reach the
trainer as masked tokens, the env/* metrics are logged and documented."""

from __future__ import annotations

import json
import math
import string

from reasoning_rl.envs import Environment, StepResult, register_environment, unregister_environment
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trainer import Trainer
from tests.reasoning_rl.conftest import tiny_config
from tests.reasoning_rl.documented_metrics import METRICS_DOC, undocumented


class Nudge(Environment):
    """Ends a turn at any digit or letter and answers " =": random tiny models make multi-turn episodes."""

    stop = tuple(string.ascii_letters + string.digits)

    def step(self, model_text: str) -> StepResult:
        return StepResult(observation=" =")


def train_with_nudge(run_dir, steps: int, max_turns: int, retry_groups: float = 0.0) -> None:
    """A GRPO run of the tiny model whose episodes run in :class:`Nudge`."""
    cfg = tiny_config(steps=steps)
    cfg.task.env = "nudge_test"
    cfg.task.episode.max_turns = max_turns
    cfg.task.episode.max_tokens = 10
    cfg.task.episode.retry_groups = retry_groups
    cfg.rollout.max_new_tokens = 6
    register_environment("nudge_test")(Nudge)
    try:
        trainer = Trainer(cfg, run_dir)
        try:
            trainer.train()
        finally:
            trainer.close()
    finally:
        unregister_environment("nudge_test")


def test_grpo_trains_on_episodes(tmp_path):
    train_with_nudge(tmp_path / "run", steps=2, max_turns=3)
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert undocumented(metrics[0]) == [], f"document these in {METRICS_DOC}"
    for m in metrics:
        assert m["env/turns_mean"] > 1 and m["env/observation_tokens_mean"] > 0
        assert math.isfinite(m["loss/total"]) and math.isfinite(m["grad/norm"])
    after = json.loads((tmp_path / "run" / "eval_after.json").read_text())
    assert after["num_problems"] == 8 and 0 <= after["greedy_accuracy"] <= 1  # held-out evaluation ran episodes


def test_grpo_trains_retry_groups_and_evaluates_whole_episodes(tmp_path):
    """task.episode.retry_groups=1: every training group continues one first turn (Nudge answers every
    turn, so every group can), which the loss does not see; held-out evaluation runs its own episodes."""
    train_with_nudge(tmp_path / "run", steps=1, max_turns=2, retry_groups=1.0)
    [m] = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert m["env/retry_group_fraction"] == 1.0 and math.isfinite(m["loss/total"])
    rows = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    by_group: dict[str, list] = {}
    for row in rows:
        by_group.setdefault(row["example_id"], []).append(row)
    for group in by_group.values():
        firsts = {r["turns"][0]["text"] for r in group}
        assert len(firsts) == 1 and all(r["turns"][0]["trained"] is False for r in group)
        assert all(r["loss_mask_spans"][0][0] >= r["turns"][1]["tokens"][1] for r in group if r["loss_mask_spans"])
    after = json.loads((tmp_path / "run" / "eval_after.json").read_text())
    assert after["num_problems"] == 8
