"""Environment registry: names in configs (``task.env=python_tool``) -> environment classes.

Same style as the verifier registry (:mod:`rewards.registry`)::

    from reasoning_rl.envs import Environment, StepResult, register_environment

    @register_environment("echo")
    class Echo(Environment):
        stop = ("\\n",)
        def step(self, model_text):
            return StepResult(observation=model_text.upper(), done=len(model_text) > 20)

    env = get_environment("echo")          # a fresh instance per episode

Third-party packages need no change here: they declare an entry point in the group
``reasoning_rl.environments`` (``name = "pkg.module:Class"``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from reasoning_rl.envs.base import Environment
from reasoning_rl.errors import UserError
from reasoning_rl.registry import Registry

ENTRY_POINT_GROUP = "reasoning_rl.environments"

E = TypeVar("E", bound=type[Environment])


class EnvironmentNotFoundError(UserError, KeyError):
    """Raised by :func:`get_environment` for an unknown name."""


class EnvironmentOptionsError(UserError, TypeError):
    """``task.episode.options`` does not fit the environment's constructor."""


def _is_environment(name: str, cls: Any) -> None:
    if not (inspect.isclass(cls) and issubclass(cls, Environment)):
        raise TypeError(f"environment {name!r} must be a subclass of reasoning_rl.envs.Environment, got {cls!r}")


ENVIRONMENTS: Registry[type[Environment]] = Registry(
    "environment", ENTRY_POINT_GROUP,
    # Built-ins register themselves on import; importing lazily keeps `import reasoning_rl.envs` cheap.
    {"python_tool": "reasoning_rl.envs.python_tool", "code_feedback": "reasoning_rl.envs.code_feedback"},
    check=_is_environment, not_found=EnvironmentNotFoundError,
    how_to_add=f"Register one with @reasoning_rl.envs.register_environment(name) or an entry point in the "
               f"{ENTRY_POINT_GROUP!r} group.")
"""Every environment by name (:class:`reasoning_rl.registry.Registry`)."""


def register_environment(name: str) -> Callable[[E], E]:
    """Class decorator registering an :class:`Environment` subclass under ``name``; a second class
    under the same name is an error (two environments silently shadowing each other)."""
    return ENVIRONMENTS.register(name)


def unregister_environment(name: str) -> None:
    """Remove ``name`` from the registry (for tests and interactive sessions)."""
    ENVIRONMENTS.remove(name)


def list_environments() -> list[str]:
    """Names of every environment :func:`get_environment` can build, sorted."""
    return ENVIRONMENTS.names()


def environment_class(name: str) -> type[Environment]:
    """The class registered as ``name``; :class:`EnvironmentNotFoundError` lists the known names."""
    return ENVIRONMENTS.get(name)


def get_environment(name: str, **options: Any) -> Environment:
    """A fresh instance of the environment ``name`` built with ``options``."""
    cls = environment_class(name)
    check_options(name, options)
    return cls(**options)


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse options the environment's constructor does not take, naming the ones it does."""
    params = inspect.signature(environment_class(name).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(options) - set(params) - {"self"})
    if unknown:
        accepted = sorted(set(params) - {"self"})
        raise EnvironmentOptionsError(f"environment {name!r} has no option(s) {unknown} (task.episode.options); "
                                      f"it accepts {accepted}")


def reload_entry_points() -> None:
    """Re-scan installed packages for environment plugins (after a ``pip install``)."""
    ENVIRONMENTS.reload_entry_points()
