"""Algorithms by name: ``algo.name=grpo`` picks the module registered as ``grpo``.

Same contract as the verifier registry (``rewards.registry``): a decorator, a loud
error on a duplicate name, and an unknown name answered with the known ones and
close matches. Third-party packages add algorithms through the entry-point group
``reasoning_rl.algorithms`` (``name = "pkg.module:AlgorithmClass"``); the class must
carry its config dataclass as ``config_class``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reasoning_rl.algo.base import Algorithm
from reasoning_rl.errors import UserError
from reasoning_rl.registry import Registry
from reasoning_rl.settings.algo import AlgoConfig

ENTRY_POINT_GROUP = "reasoning_rl.algorithms"


class AlgorithmNotFoundError(UserError, KeyError):
    """An unknown algorithm name (the message lists the known ones)."""


@dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    algorithm: type[Algorithm]
    config_class: type[AlgoConfig]


class _Algorithms(Registry[AlgorithmEntry]):
    """The registry's entries pair the class with its config dataclass; a plugin's class carries it as
    ``config_class``."""

    def add_plugin(self, name: str, obj: Any) -> None:
        register_algorithm(name, obj.config_class)(obj)


ALGORITHMS = _Algorithms(
    "algorithm", ENTRY_POINT_GROUP,
    # Modules whose import registers the built-in algorithms.
    {"grpo": "reasoning_rl.algo.grpo", "ppo": "reasoning_rl.algo.ppo", "sft": "reasoning_rl.algo.sft",
     "rft": "reasoning_rl.algo.rft", "dpo": "reasoning_rl.algo.dpo"},
    not_found=AlgorithmNotFoundError,
    how_to_add=f"Register one with @register_algorithm(name, ConfigClass) or an entry point in the "
               f"{ENTRY_POINT_GROUP!r} group (docs/algorithms.md).")
"""Every algorithm by name (:class:`reasoning_rl.registry.Registry`)."""


def register_algorithm(name: str, config_class: type[AlgoConfig]) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: ``@register_algorithm("grpo", GRPOConfig)``."""
    if not (isinstance(config_class, type) and issubclass(config_class, AlgoConfig)):
        raise TypeError(f"algorithm {name!r}: config_class must be a subclass of AlgoConfig, got {config_class!r}")

    def decorate(cls: type[Algorithm]) -> type[Algorithm]:
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(f"algorithm {name!r}: {cls!r} is not a subclass of reasoning_rl.algo.base.Algorithm")
        ALGORITHMS.add(name, AlgorithmEntry(name, cls, config_class), identity=cls)
        return cls

    return decorate


def get_algorithm(name: str) -> AlgorithmEntry:
    """The algorithm registered as ``name`` (``algo.name``); an unknown name lists the known ones."""
    return ALGORITHMS.get(name)


def list_algorithms() -> list[str]:
    """Every algorithm name, built-in and plugged in, sorted."""
    return ALGORITHMS.names()
