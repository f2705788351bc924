"""A tiny, fast training configuration for end-to-end tests."""

import pytest

from reasoning_rl.config import TrainConfig
from reasoning_rl.policy.loading import TinyModelConfig


def tiny_config(steps: int = 4) -> TrainConfig:
    cfg = TrainConfig()
    cfg.model.tiny = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.max_train_examples = 64
    cfg.task.max_eval_examples = 8
    cfg.algo.prompts_per_step = 2
    cfg.algo.group_size = 4
    cfg.algo.micro_batch_size = 3  # not a divisor of 8: exercises uneven gradient accumulation
    cfg.algo.learning_rate = 1e-3
    cfg.rollout.max_new_tokens = 4
    cfg.rollout.reward_workers = 1
    cfg.trainer.steps = steps
    cfg.trainer.save_every = 2
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    cfg.evaluation.num_examples = 8
    cfg.evaluation.samples_per_problem = 2
    return cfg


@pytest.fixture
def small_cfg() -> TrainConfig:
    return tiny_config()


def _train(cfg, run_dir):
    from reasoning_rl.trainer import Trainer

    trainer = Trainer(cfg, run_dir)
    try:
        return trainer, trainer.train()
    finally:
        trainer.close()


@pytest.fixture
def resume_matches_uninterrupted_run():
    """``check(cfg, tmp_path)``: train 4 steps uninterrupted; train again, killed in step 3 (after
    the step-2 checkpoint), then resumed; the resumed run must log the same metrics, bit for bit
    (timings aside). Returns the uninterrupted run's metrics for further checks."""

    def check(cfg, tmp_path):
        from reasoning_rl.checkpoint import list_checkpoints
        from reasoning_rl.metrics_log import read_metrics
        from reasoning_rl.trainer import Trainer

        _train(cfg, tmp_path / "full")

        class Killed(Exception):
            pass

        trainer = Trainer(cfg, tmp_path / "killed")
        update = trainer.algorithm.update

        def dies_at_step_3(ro):
            if trainer.step == 2:
                raise Killed
            return update(ro)

        trainer.algorithm.update = dies_at_step_3
        with pytest.raises(Killed):
            trainer.train()
        trainer.close()
        assert [p.name for p in list_checkpoints(tmp_path / "killed")] == ["checkpoint-2"]

        cfg.trainer.resume = True
        _train(cfg, tmp_path / "killed")
        full = read_metrics(tmp_path / "full" / "metrics.jsonl")
        resumed = read_metrics(tmp_path / "killed" / "metrics.jsonl")
        assert [m["step"] for m in resumed] == [1, 2, 3, 4]
        for a, b in zip(full, resumed):
            for key, value in a.items():
                if key.startswith(("time/", "throughput/")) or value is None:
                    continue
                # Bit for bit: the resumed run computes on the same values at the same alignment
                # (reasoning_rl.policy.loading.align_tensors), so nothing may differ, not even rounding.
                assert b[key] == value, (a["step"], key, value, b[key])
        return full

    return check
