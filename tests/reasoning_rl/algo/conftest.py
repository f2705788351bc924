"""Helpers shared by the algorithm tests."""

from __future__ import annotations

from typing import Any


def set_settings(algo: Any, settings: dict[str, Any]) -> Any:
    """Set dotted settings of an algorithm config in place (``{"kl.beta": 0.0, "num_iterations": 2}``): the
    groups' fields as a command line names them, less the ``algo.`` prefix. Returns ``algo``."""
    for dotted, value in settings.items():
        *path, name = dotted.split(".")
        owner = algo
        for part in path:
            owner = getattr(owner, part)
        if not hasattr(owner, name):
            raise AttributeError(f"algo.{dotted} is not a setting of {type(algo).__name__}")
        setattr(owner, name, value)
    return algo
