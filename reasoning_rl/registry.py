"""One registry class for everything a user adds by name: verifiers (``rewards.registry``), algorithms
(``reasoning_rl.algo.registry``) and environments (``reasoning_rl.envs.registry``).

A :class:`Registry` maps names in configs to objects. It is filled three ways, in this order of lookup:

1. ``@registry.register(name)`` on a class or function, in the user's own module;
2. built-in modules that register themselves when imported, imported only when one of their names is
   asked for (so ``import rewards`` stays cheap: no SymPy, no sandbox set-up);
3. installed packages that declare an entry point in the registry's group (``name = "pkg.module:obj"``),
   read once, on the first name no built-in holds.

A second object under a name already taken is an error (two verifiers silently shadowing each other
would change rewards without notice); an unknown name raises the registry's not-found error, a
:class:`~reasoning_rl.errors.UserError`, listing the known names and the close matches ("did you mean").
A plugin that fails to import is warned about and skipped, so it cannot break the others.

This module imports nothing of the project but its errors, so every layer can hold a registry.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import warnings
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from reasoning_rl.errors import UserError

T = TypeVar("T")


class NotRegisteredError(UserError, KeyError):
    """An unknown name; the message lists the known names and close matches."""


def qualname(obj: Any) -> str:
    """``module.QualifiedName`` of a class or function (of the function under a ``functools.partial``)."""
    if isinstance(obj, functools.partial):
        obj = obj.func
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry(Generic[T]):
    """Names -> objects of one kind.

    ``kind`` names the kind in messages ("verifier"); ``entry_point_group`` is where plugins declare
    themselves; ``builtins`` maps each built-in name to the module whose import registers it;
    ``check`` (optional) refuses an object that is not of the kind (raise ``TypeError``);
    ``not_found`` is the error raised for an unknown name; ``how_to_add`` ends that message.
    """

    def __init__(self, kind: str, entry_point_group: str, builtins: dict[str, str] | None = None, *,
                 check: Callable[[str, Any], None] | None = None,
                 not_found: type[UserError] = NotRegisteredError, how_to_add: str = "") -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.builtins = dict(builtins or {})
        self._check = check
        self._not_found = not_found
        self._how_to_add = how_to_add
        self._entries: dict[str, T] = {}
        self._identities: dict[str, Any] = {}
        self._entry_points_read = False

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator registering its object under ``name``; returns the object unchanged."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: Any) -> Any:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, entry: T, *, identity: Any = None) -> None:
        """Register ``entry`` under ``name``. ``identity`` (default: the entry) decides whether a second
        registration is the same object again (a module imported twice) or another one (an error)."""
        new = identity if identity is not None else entry
        if self._check is not None:
            self._check(name, new)
        old = self._identities.get(name)
        if old is not None and old is not new and qualname(old) != qualname(new):
            raise ValueError(f"{self.kind} name {name!r} is already registered by {qualname(old)}; "
                             f"pick another name for {qualname(new)}")
        self._entries[name] = entry
        self._identities[name] = new

    def remove(self, name: str) -> None:
        """Forget ``name`` (for tests and interactive sessions)."""
        self._entries.pop(name, None)
        self._identities.pop(name, None)

    def names(self) -> list[str]:
        """Every name :meth:`get` can answer, sorted (built-ins not yet imported included)."""
        self._read_entry_points()
        return sorted(set(self._entries) | set(self.builtins))

    def get(self, name: str) -> T:
        """The object registered as ``name``; the not-found error lists the known names."""
        if name in self._entries:
            return self._entries[name]
        if name in self.builtins:
            importlib.import_module(self.builtins[name])
            if name in self._entries:
                return self._entries[name]
        self._read_entry_points()
        if name in self._entries:
            return self._entries[name]
        known = self.names()
        close = difflib.get_close_matches(name, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise self._not_found(f"unknown {self.kind} {name!r}.{hint} Known {self.kind}s: {', '.join(known)}."
                              + (f" {self._how_to_add}" if self._how_to_add else ""))

    def reload_entry_points(self) -> None:
        """Read the entry-point group again (after a ``pip install`` in a running session)."""
        importlib.invalidate_caches()
        self._read_entry_points(force=True)

    def add_plugin(self, name: str, obj: Any) -> None:
        """Register an object loaded from an entry point (a registry whose entries wrap the object, such
        as the algorithms' (class, config class) pairs, overrides this)."""
        self.add(name, obj)

    def _read_entry_points(self, force: bool = False) -> None:
        if self._entry_points_read and not force:
            return
        self._entry_points_read = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name in self._entries:
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not break every other name
                warnings.warn(f"could not load {self.kind} plugin {ep.name!r} ({ep.value}): {exc!r}",
                              RuntimeWarning, stacklevel=3)
                continue
            if ep.name not in self._entries:  # the plugin's module may have registered itself on import
                self.add_plugin(ep.name, obj)
