"""Environments for multi-turn episodes (``task.env=<name>``), beside the verifier registry.

:mod:`~reasoning_rl.envs.base` is the contract (:class:`Environment`, :class:`StepResult`,
:class:`EpisodeConfig`), :mod:`~reasoning_rl.envs.registry` finds environments by name or entry
point, :mod:`~reasoning_rl.envs.episode` runs episodes over any engine that continues from token
ids, :mod:`~reasoning_rl.envs.python_tool` is the built-in tool environment. docs/tools.md.
"""

from reasoning_rl.envs.base import Environment, StepResult
from reasoning_rl.envs.registry import (
    EnvironmentNotFoundError,
    EnvironmentOptionsError,
    get_environment,
    list_environments,
    register_environment,
    unregister_environment,
)
from reasoning_rl.settings.task import EpisodeConfig

__all__ = [
    "Environment",
    "EnvironmentNotFoundError",
    "EnvironmentOptionsError",
    "EpisodeConfig",
    "StepResult",
    "get_environment",
    "list_environments",
    "register_environment",
    "unregister_environment",
]
