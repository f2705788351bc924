"""The schema of a training run, mirrored by the YAML files in ``conf/``.

:class:`TrainConfig` holds one dataclass per group (``task``, ``model``, ``algo``, ``rollout``,
``trainer``, ``warmstart``, ``evaluation``), each defined with a docstring per field in
``reasoning_rl/settings/``; the defaults are the values of ``conf/train.yaml`` and the default group
files (a test checks they agree). ``algo`` is typed here by the base :class:`AlgoConfig`; a run's
``algo`` is the chosen algorithm's own subclass (``GRPOConfig`` in ``reasoning_rl/algo/grpo_config.py``),
which Hydra types through ``reasoning_rl.config_store.register_configs``. This module and
``reasoning_rl/settings/`` import no feature module (``tests/test_architecture.py``); the checks of the
values are ``reasoning_rl.validation``'s, run before a run writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasoning_rl.settings.algo import AlgoConfig
from reasoning_rl.settings.evaluation import EvalConfig, WarmStartConfig
from reasoning_rl.settings.model import ModelConfig
from reasoning_rl.settings.rollout import RolloutConfig
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.settings.trainer import TrainerConfig


@dataclass
class TrainConfig:
    """A full training run: ``reasoning-rl-train`` composes this from ``conf/``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
