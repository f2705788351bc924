"""Algorithms by name: ``algo.name=grpo`` picks the module registered as ``grpo``.

Same contract as the verifier registry (``rewards.registry``): a decorator, a loud
error on a duplicate name, and an unknown name answered with the known ones and
close matches. Third-party packages add algorithms through the entry-point group
``reasoning_rl.algorithms`` (``name = "pkg.module:AlgorithmClass"``); the class must
carry its config dataclass as ``config_class``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module, metadata

from reasoning_rl.algo.base import AlgoConfig, Algorithm
from reasoning_rl.errors import UserError

ENTRY_POINT_GROUP = "reasoning_rl.algorithms"
BUILTIN_MODULES = ("reasoning_rl.algo.grpo", "reasoning_rl.algo.ppo", "reasoning_rl.algo.sft", "reasoning_rl.algo.rft",
                   "reasoning_rl.algo.dpo")
"""Modules whose import registers the built-in algorithms."""


class AlgorithmNotFoundError(UserError, KeyError):
    """An unknown algorithm name (the message lists the known ones)."""


@dataclass(frozen=True)
class AlgorithmEntry:
    name: str
    algorithm: type[Algorithm]
    config_class: type[AlgoConfig]


_REGISTRY: dict[str, AlgorithmEntry] = {}
_loaded = False


def register_algorithm(name: str, config_class: type[AlgoConfig]) -> Callable[[type[Algorithm]], type[Algorithm]]:
    """Class decorator: ``@register_algorithm("grpo", GRPOConfig)``."""
    if not (isinstance(config_class, type) and issubclass(config_class, AlgoConfig)):
        raise TypeError(f"algorithm {name!r}: config_class must be a subclass of AlgoConfig, got {config_class!r}")

    def decorate(cls: type[Algorithm]) -> type[Algorithm]:
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            raise TypeError(f"algorithm {name!r}: {cls!r} is not a subclass of reasoning_rl.algo.base.Algorithm")
        if name in _REGISTRY and _REGISTRY[name].algorithm is not cls:
            raise ValueError(f"algorithm {name!r} is already registered by {_REGISTRY[name].algorithm.__module__}; "
                             "choose another name")
        _REGISTRY[name] = AlgorithmEntry(name, cls, config_class)
        return cls

    return decorate


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN_MODULES:
        import_module(module)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            cls = ep.load()
            register_algorithm(ep.name, cls.config_class)(cls)


def get_algorithm(name: str) -> AlgorithmEntry:
    """The algorithm registered as ``name``; an unknown name lists the known ones."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name]
    close = difflib.get_close_matches(name, list(_REGISTRY), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise AlgorithmNotFoundError(f"unknown algorithm algo.name={name!r}.{hint} "
                                 f"Known algorithms: {', '.join(list_algorithms())}")


def list_algorithms() -> list[str]:
    _load()
    return sorted(_REGISTRY)
