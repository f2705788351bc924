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

import hashlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from reasoning_rl.errors import UserError
from reasoning_rl.registry import Registry, qualname
from rewards.types import VerifierResult, as_result

ENTRY_POINT_GROUP = "reasoning_rl.verifiers"

T = TypeVar("T")


class VerifierNotFoundError(UserError, KeyError):
    """Raised by :func:`get_verifier` for an unknown name."""


VERIFIERS: Registry[Any] = Registry(
    "verifier", ENTRY_POINT_GROUP,
    # Built-in verifiers live in modules that register themselves on import (imported on first use).
    {"format": "rewards.builtin", "overlong": "rewards.builtin", "math": "rewards.math", "code": "rewards.code",
     "math_verify": "rewards.math.external"},
    not_found=VerifierNotFoundError,
    how_to_add=f"Register one with @rewards.register_verifier(name) or an entry point in the {ENTRY_POINT_GROUP!r} "
               "group.")
"""Every verifier by name (:class:`reasoning_rl.registry.Registry`)."""


def register_verifier(name: str) -> Callable[[T], T]:
    """Decorator registering a verifier class or function under ``name``; a second object under the
    same name is an error."""
    return VERIFIERS.register(name)


def unregister_verifier(name: str) -> None:
    """Remove ``name`` from the registry (for tests and interactive sessions)."""
    VERIFIERS.remove(name)


def list_verifiers() -> list[str]:
    """Names of every verifier that :func:`get_verifier` can build, sorted."""
    return VERIFIERS.names()


def get_verifier(name: str, **options: Any) -> Callable[..., VerifierResult]:
    """Build the verifier registered as ``name`` with ``options``.

    Raises :class:`VerifierNotFoundError` listing the known names (and close
    matches) when ``name`` is unknown, and ``TypeError`` naming the bad option when
    the options do not fit the verifier.
    """
    obj = VERIFIERS.get(name)
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


def verifier_code_digest(name: str) -> str:
    """A digest of the source that scores for the verifier ``name``: every ``.py`` file of the package that
    defines it (``rewards/math/`` for ``math``, ``rewards/code/`` for ``code``), or its one module when that is
    a top-level module (``rewards/builtin.py``, a user's ``my_verifiers.py``). Cached scores carry it, so that
    a change to the verifier's code re-scores them instead of reporting the old scores."""
    module = sys.modules.get(getattr(VERIFIERS.get(name), "__module__", ""), None)
    source = Path(getattr(module, "__file__", None) or "")
    if not source.is_file():
        return "unknown"
    in_subpackage = source.name == "__init__.py" or module.__name__.count(".") >= 2  # rewards.math.verifier
    files = sorted(source.parent.rglob("*.py")) if in_subpackage else [source]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(source.parent).as_posix().encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]


class FunctionVerifier:
    """A registered function with bound options; normalises its return value to a
    :class:`VerifierResult`. Picklable when the function is module-level."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.fn = fn
        self.options = dict(options)

    def __call__(self, completion: str, reference: Any, **fields: Any) -> VerifierResult:
        return as_result(self.fn(completion, reference, **{**fields, **self.options}))

    def __repr__(self) -> str:
        return f"FunctionVerifier({qualname(self.fn)}, {self.options})"


def reload_entry_points() -> None:
    """Re-scan installed packages for verifier plugins (after a ``pip install``)."""
    VERIFIERS.reload_entry_points()


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
