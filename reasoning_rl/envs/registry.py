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

import difflib
import importlib
import inspect
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from reasoning_rl.envs.base import Environment
from reasoning_rl.errors import UserError

ENTRY_POINT_GROUP = "reasoning_rl.environments"

# Built-ins register themselves on import; importing lazily keeps `import reasoning_rl.envs` cheap.
_BUILTIN_MODULES: dict[str, str] = {"python_tool": "reasoning_rl.envs.python_tool",
                                     "code_feedback": "reasoning_rl.envs.code_feedback"}

_REGISTRY: dict[str, type[Environment]] = {}
_entry_points_loaded = False

E = TypeVar("E", bound=type[Environment])


class EnvironmentNotFoundError(UserError, KeyError):
    """Raised by :func:`get_environment` for an unknown name."""


class EnvironmentOptionsError(UserError, TypeError):
    """``task.episode.options`` does not fit the environment's constructor."""


def register_environment(name: str) -> Callable[[E], E]:
    """Class decorator registering an :class:`Environment` subclass under ``name``; a second class
    under the same name is an error (two environments silently shadowing each other)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"environment name must be a non-empty string, got {name!r}")

    def decorator(cls: E) -> E:
        if not (inspect.isclass(cls) and issubclass(cls, Environment)):
            raise TypeError(f"environment {name!r} must be a subclass of reasoning_rl.envs.Environment, got {cls!r}")
        existing = _REGISTRY.get(name)
        if existing is not None and _qualname(existing) != _qualname(cls):
            raise ValueError(f"environment name {name!r} is already registered by {_qualname(existing)}; "
                             f"pick another name for {_qualname(cls)}")
        _REGISTRY[name] = cls
        return cls

    return decorator


def unregister_environment(name: str) -> None:
    """Remove ``name`` from the registry (for tests and interactive sessions)."""
    _REGISTRY.pop(name, None)


def list_environments() -> list[str]:
    """Names of every environment :func:`get_environment` can build, sorted."""
    _load_entry_points()
    return sorted(set(_REGISTRY) | set(_BUILTIN_MODULES))


def environment_class(name: str) -> type[Environment]:
    """The class registered as ``name``; :class:`EnvironmentNotFoundError` lists the known names."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
        if name in _REGISTRY:
            return _REGISTRY[name]
    _load_entry_points()
    if name in _REGISTRY:
        return _REGISTRY[name]
    known = list_environments()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise EnvironmentNotFoundError(
        f"unknown environment {name!r}.{hint} Known environments: {', '.join(known)}. Register one with "
        f"@reasoning_rl.envs.register_environment(name) or an entry point in the {ENTRY_POINT_GROUP!r} group.")


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


def _load_entry_points(force: bool = False) -> None:
    """Register environments that installed packages declare in the entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded and not force:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not break every other environment
            warnings.warn(f"could not load environment plugin {ep.name!r} ({ep.value}): {exc!r}", RuntimeWarning,
                          stacklevel=2)
            continue
        if ep.name not in _REGISTRY:  # the plugin module may have registered itself with the decorator
            register_environment(ep.name)(obj)


def reload_entry_points() -> None:
    """Re-scan installed packages for environment plugins (after a ``pip install``)."""
    importlib.invalidate_caches()
    _load_entry_points(force=True)


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
