"""The main job (`reasoning-rl-train` with the default config), shortened: same code path
(warm start, GRPO, held-out evaluation), fewer steps and single-digit operands so it fits
in CI. GRPO must raise the training reward."""

import json
import subprocess
import sys

import pytest

from reasoning_rl.run_folder.metrics_log import read_metrics


@pytest.mark.slow
def test_short_default_run_raises_reward(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", f"trainer.output_dir={run}", "trainer.steps=30",
         "trainer.progress_bar=false", "trainer.num_threads=1", "+task.source_kwargs.max_operand=9",
         "evaluation.num_examples=50", "evaluation.samples_per_problem=2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| greedy |" in out.stdout and "warm start:" in out.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["warm_start"]["probe_accuracy"] >= 0.3  # stopped on purpose at partial accuracy
    rewards = [m["reward/mean"] for m in read_metrics(run / "metrics.jsonl")]
    assert len(rewards) == 30
    before, after = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert after > before, f"reward did not rise: first 5 steps {before:.3f}, last 5 steps {after:.3f}"
    assert (run / "reward_curve.png").exists() and (run / "checkpoint-30" / "config.json").exists()
