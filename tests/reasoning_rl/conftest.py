"""A tiny, fast training configuration for end-to-end tests."""

import pytest

from reasoning_rl.config import TrainConfig
from reasoning_rl.models import TinyModelConfig


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
