"""Verifier registry: names in configs -> verifier objects.

Register with the decorator, on a class (options go to its constructor, instances
are callable) or on a plain function (options are bound as keyword arguments)::

    from rewards import register_verifier

    @register_verifier("exact_match")
    def exact_match(completion: str, reference: str, *, strip: bool = True, **fields) -> float:
        return float((completion.strip() if strip else completion) == reference)

    verifier = rewards.get_verifier("exact_match", strip=False)

Third-party packages need no change here: they declare an entry point in the group
``reasoning_rl.verifiers`` (``name = "pkg.module:object"``) and the verifier is
found by name, e.g. from a Hydra config's ``verifier: name``.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeVar

from reasoning_rl.errors import UserError
from rewards.types import VerifierResult, as_result

ENTRY_POINT_GROUP = "reasoning_rl.verifiers"

# Built-in verifiers live in modules that register themselves on import; importing
# them lazily keeps `import rewards` cheap (no SymPy, no sandbox set-up).
_BUILTIN_MODULES: dict[str, str] = {
    "format": "rewards.builtin",
    "overlong": "rewards.builtin",
    "math": "rewards.math",
    "code": "rewards.code",
    "math_verify": "rewards.math.external",
}

_REGISTRY: dict[str, Any] = {}
_entry_points_loaded = False

T = TypeVar("T")


class VerifierNotFoundError(UserError, KeyError):
    """Raised by :func:`get_verifier` for an unknown name."""


def register_verifier(name: str) -> Callable[[T], T]:
    """Decorator registering a verifier class or function under ``name``.

    A second registration of the same name (by another object) is an error: two
    verifiers silently shadowing each other would change rewards without notice.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"verifier name must be a non-empty string, got {name!r}")

    def decorator(obj: T) -> T:
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not obj and _qualname(existing) != _qualname(obj):
            raise ValueError(
                f"verifier name {name!r} is already registered by {_qualname(existing)}; "
                f"pick another name for {_qualname(obj)}"
            )
        _REGISTRY[name] = obj
        return obj

    return decorator


def unregister_verifier(name: str) -> None:
    """Remove ``name`` from the registry (for tests and interactive sessions)."""
    _REGISTRY.pop(name, None)


def list_verifiers() -> list[str]:
    """Names of every verifier that :func:`get_verifier` can build, sorted."""
    _load_entry_points()
    return sorted(set(_REGISTRY) | set(_BUILTIN_MODULES))


def get_verifier(name: str, **options: Any) -> Callable[..., VerifierResult]:
    """Build the verifier registered as ``name`` with ``options``.

    Raises :class:`VerifierNotFoundError` listing the known names (and close
    matches) when ``name`` is unknown, and ``TypeError`` naming the bad option when
    the options do not fit the verifier.
    """
    obj = _lookup(name)
    if inspect.isclass(obj):
        try:
            return obj(**options)
        except TypeError as exc:
            raise TypeError(f"verifier {name!r}: bad options {sorted(options)}: {exc}") from exc
    if callable(obj):
        if options:
            _check_function_options(name, obj, options)
        return FunctionVerifier(obj, options)
    raise TypeError(f"verifier {name!r} is registered as {obj!r}, which is neither a class nor a function")


class FunctionVerifier:
    """A registered function with bound options; normalises its return value to a
    :class:`VerifierResult`. Picklable when the function is module-level."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.fn = fn
        self.options = dict(options)

    def __call__(self, completion: str, reference: Any, **fields: Any) -> VerifierResult:
        return as_result(self.fn(completion, reference, **{**fields, **self.options}))

    def __repr__(self) -> str:
        return f"FunctionVerifier({_qualname(self.fn)}, {self.options})"


def _lookup(name: str) -> Any:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
        if name in _REGISTRY:
            return _REGISTRY[name]
    _load_entry_points()
    if name in _REGISTRY:
        return _REGISTRY[name]
    known = list_verifiers()
    close = difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise VerifierNotFoundError(
        f"unknown verifier {name!r}.{hint} Known verifiers: {', '.join(known)}. "
        f"Register one with @rewards.register_verifier(name) or an entry point in the "
        f"{ENTRY_POINT_GROUP!r} group."
    )


def _load_entry_points(force: bool = False) -> None:
    """Register verifiers that installed packages declare in the entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded and not force:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not break every other verifier
            import warnings

            warnings.warn(
                f"could not load verifier plugin {ep.name!r} ({ep.value}): {exc!r}", RuntimeWarning, stacklevel=2
            )
            continue
        # The plugin module may already have registered itself with the decorator.
        if ep.name not in _REGISTRY:
            register_verifier(ep.name)(obj)


def reload_entry_points() -> None:
    """Re-scan installed packages for verifier plugins (after a ``pip install``)."""
    importlib.invalidate_caches()
    _load_entry_points(force=True)


def _check_function_options(name: str, fn: Callable[..., Any], options: dict[str, Any]) -> None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise TypeError(f"verifier {name!r} has no option(s) {unknown}; it accepts {sorted(params)[2:]}")


def _qualname(obj: Any) -> str:
    if isinstance(obj, functools.partial):
        obj = obj.func
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
