"""Plain-data encoding of the values that cross between the harness (in Z) and the candidate C.

The harness decodes with :func:`decode` (trusted): the result is built only from builtin
int/float/complex/str/bytes/bool/None/list/tuple/set/frozenset/dict/range, plus
:class:`RemoteRef` handles that compare equal to nothing but themselves. JSON scalars and
arrays stand for themselves (JSON round-trips ints and floats exactly); other types are one-key
objects: {"t": [...]} tuple, {"s"}/{"fs"} sets, {"d": [[k, v], ...]} dict, {"i": hex} huge
int, {"c": [re, im]}, {"b": hex} bytes, {"rg": [start, stop, step]}, {"ty": name} builtin
type, {"m": name} stdlib module, {"r": [id, type, callable, truth]} handle, {"rn": name}.
The encoded values travel inside the frames of :mod:`.wire`.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Protocol


class Caller(Protocol):
    """What a :class:`RemoteFunction` calls through: the harness's channel to C (:class:`.harness.Channel`)."""

    def call(self, target: list[Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any: ...


class RemoteRef:
    """Handle to a non-plain object living in C (a class instance, a re.Match, a generator).

    Equal only to itself. Its truth value is the one C reported as data when it returned the
    object -- no more trustworthy than the program returning True, and no less.
    """

    __slots__ = ("ref", "truth", "type_name")

    def __init__(self, ref: int, type_name: str, truth: bool | None = None) -> None:
        self.ref = ref
        self.type_name = type_name
        self.truth = truth

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        if self.truth is None:
            raise TypeError(f"the {self.type_name} object returned by the program has no truth value")
        return self.truth

    def __repr__(self) -> str:
        return f"<{self.type_name} object in the sandboxed program>"


class RemoteFunction(RemoteRef):
    """A callable in C: calling it sends the (plain) arguments to C and decodes the result."""

    __slots__ = ("channel", "target")

    def __init__(self, channel: Caller, target: list[Any], type_name: str = "function") -> None:
        super().__init__(-1 if target[0] == "n" else int(target[1]), type_name, True)
        self.channel = channel
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.channel.call(self.target, args, kwargs)

    def __repr__(self) -> str:
        return f"<function {self.target[1]} in the sandboxed program>"


_BUILTIN_TYPES = {name: obj for name, obj in vars(__import__("builtins")).items() if isinstance(obj, type)}
_BIG = 1 << 62


def encode(value: Any, refs: dict[Any, Any], for_candidate: bool, depth: int = 0) -> Any:
    """Value -> JSON-able form. ``for_candidate``: C's encoder (objects it cannot reduce become
    handles); otherwise the harness's (its handles become references, anything else is an error)."""
    t = type(value)
    if value is None or t is bool or t is str or t is float:
        return value
    if t is int:
        return value if -_BIG < value < _BIG else {"i": hex(value)}
    if depth > 100:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if t is list:
        return [encode(v, refs, for_candidate, d) for v in value]
    if isinstance(value, RemoteFunction) and not for_candidate:
        return {"r": [value.target[1]]} if value.target[0] == "r" else {"rn": value.target[1]}
    if isinstance(value, RemoteRef) and not for_candidate:
        return {"r": [value.ref]}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return encode(int.__index__(value), refs, for_candidate, d)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return {"c": [complex.__complex__(value).real, complex.__complex__(value).imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, tuple):
        return {"t": [encode(v, refs, for_candidate, d) for v in tuple.__iter__(value)]}
    if isinstance(value, list):
        return [encode(v, refs, for_candidate, d) for v in list.__iter__(value)]
    if isinstance(value, frozenset):
        return {"fs": [encode(v, refs, for_candidate, d) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [encode(v, refs, for_candidate, d) for v in set.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[encode(k, refs, for_candidate, d), encode(v, refs, for_candidate, d)]
                      for k, v in dict.items(value)]}
    if isinstance(value, range):
        return {"rg": [value.start, value.stop, value.step]}
    if isinstance(value, type) and _BUILTIN_TYPES.get(value.__name__) is value:
        return {"ty": value.__name__}  # e.g. remove_type(items, int)
    if not for_candidate:
        raise TypeError(f"cannot send a {type(value).__name__} to the sandboxed program")
    if isinstance(value, types.ModuleType):
        return {"m": value.__name__}
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist) and not isinstance(value, type):
        return encode(tolist(), refs, for_candidate, d)
    try:
        truth: bool | None = bool(value)
    except Exception:
        truth = None
    refs[id(value)] = value
    return {"r": [id(value), type(value).__name__, bool(callable(value)), truth]}


def decode(x: Any, refs: Any, depth: int = 0) -> Any:
    """JSON-able form -> value. In the harness (``refs`` is the channel) this is the trusted decoder: it
    builds builtin values only. In C (``refs`` a dict) it also resolves handles to objects."""
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if depth > 100:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if t is list:
        return [decode(v, refs, d) for v in x]
    if t is not dict or len(x) != 1:
        raise ValueError(f"malformed value in the protocol: {t.__name__}")
    ((tag, v),) = x.items()
    if tag == "i":
        if len(v) > 100_000:
            raise ValueError("integer too large")
        return int(v, 16)
    if tag in ("t", "s", "fs"):
        items = [decode(e, refs, d) for e in v]
        return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
    if tag == "d":
        return {decode(k, refs, d): decode(e, refs, d) for k, e in v}
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "b":
        return bytes.fromhex(v)
    if tag == "rg":
        return range(int(v[0]), int(v[1]), int(v[2]))
    if tag == "ty":
        return _BUILTIN_TYPES[str(v)]
    if tag == "rn" and isinstance(refs, dict):
        return refs["namespace"][str(v)]
    if tag == "r":
        if isinstance(refs, dict):
            return refs[int(v[0])]
        truth = v[3] if type(v[3]) is bool else None
        return refs.handle(int(v[0]), str(v[1])[:100], bool(v[2]), truth)
    raise ValueError(f"unknown tag {tag!r} in the protocol")

