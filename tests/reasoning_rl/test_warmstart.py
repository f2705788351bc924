"""The supervised warm start runs the sft algorithm (reasoning_rl.warmstart)."""

import random

import torch

from reasoning_rl.algo.sft import SFTConfig
from reasoning_rl.settings.evaluation import WarmStartConfig
from reasoning_rl.warmstart import DrawWithReplacement, warm_start_settings


def test_the_batches_are_seeded_draws_with_replacement():
    """The same indices as the warm start has always drawn: one random.Random(seed), randrange per row."""
    rng = random.Random(5)
    expected = [[rng.randrange(7) for _ in range(4)] for _ in range(3)]
    sampler = DrawWithReplacement(7, seed=5)
    assert [sampler.next(4) for _ in range(3)] == expected


def test_the_settings_are_the_warm_starts_own():
    w = WarmStartConfig(batch_size=16, learning_rate=3e-3)
    s = warm_start_settings(w)
    assert isinstance(s, SFTConfig) and s.problems() == []
    assert (s.prompts_per_step, s.micro_batch_size) == (16, 16)  # one forward/backward pass a step
    assert (s.learning_rate, s.weight_decay, s.adam_beta2, s.max_grad_norm) == (3e-3, 0.0, 0.999, 1.0)
    assert (s.loss_aggregation, s.lr_schedule) == ("token_mean", "constant")


def test_a_warm_start_trains_the_policy_with_sft_and_probes_it(small_cfg, tmp_path):
    from reasoning_rl.trainer import Trainer

    small_cfg.warmstart.enabled = True
    small_cfg.warmstart.max_steps = 3
    small_cfg.warmstart.check_every = 2
    small_cfg.warmstart.batch_size = 4
    small_cfg.warmstart.probe_size = 4
    small_cfg.warmstart.stop_at_accuracy = 1.0  # not reached: all 3 steps run
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        result = trainer._warm_start()
        moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    finally:
        trainer.close()
    assert result["steps"] == 3
    assert [h["step"] for h in result["history"]] == [2, 3]  # every check_every steps, and the last
    assert all(h["loss"] > 0 and 0.0 <= h["probe_accuracy"] <= 1.0 for h in result["history"])
    assert moved  # the SFT steps changed the weights
