"""One PPO step of the tiny model on two gloo ranks, for tests/reasoning_rl/algo/test_ppo.py.
Run as ``torchrun --nproc_per_node 2 ppo_dist_worker.py RUN``; rank 0 writes ``RUN/metrics.jsonl``.
The completions come from ``dist_worker.FixedEngine`` (fixed, of several lengths, rewards 0 and 1)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))  # dist_worker

from dist_worker import FixedEngine, config

from reasoning_rl.algo.losses import KLPenaltyConfig
from reasoning_rl.algo.ppo import PPOConfig
from reasoning_rl.rollouts.stack import RolloutStack
from reasoning_rl.trainer import Trainer


class FixedTrainer(Trainer):
    def __init__(self, cfg, run_dir) -> None:
        super().__init__(cfg, run_dir)
        self.rollouts = RolloutStack.single(FixedEngine(self.tokenizer))  # training and evaluation
        self.context.engine = self.rollouts.rollout


def main(run_dir: str) -> None:
    cfg = config(run_dir, steps=1, resume=False)
    cfg.algo = PPOConfig(prompts_per_step=4, group_size=2, micro_batch_size=3, learning_rate=1e-3, kl=KLPenaltyConfig(beta=0.04))
    cfg.trainer.save_every = 0
    cfg.evaluation.enabled = False
    trainer = FixedTrainer(cfg, run_dir)
    try:
        trainer.train()
    finally:
        trainer.close()


if __name__ == "__main__":
    main(sys.argv[1])
