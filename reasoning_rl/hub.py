"""Telling "the hub cannot be reached" apart from other loading failures, for one-line user errors.

``transformers`` and ``datasets`` report an unreachable hub (no network, or ``HF_HUB_OFFLINE=1``
with nothing cached) as an ``OSError`` whose cause chain holds ``huggingface_hub``'s
``LocalEntryNotFoundError`` / ``OfflineModeIsEnabled`` or a connection error of the HTTP
client. Model loading (:mod:`reasoning_rl.policy.loading`) and dataset loading
(:mod:`reasoning_rl.tasks.data`) turn those into one line naming the hub name and the local
alternative, instead of a traceback.
"""

from __future__ import annotations

UNREACHABLE = frozenset({
    "LocalEntryNotFoundError",   # huggingface_hub: not cached, and the hub could not be asked
    "OfflineModeIsEnabled",      # huggingface_hub: HF_HUB_OFFLINE=1
    "ConnectionError",           # datasets, requests, the builtin
    "ConnectError",              # httpx
    "ConnectTimeout",
    "NameResolutionError",
})
"""Exception class names (anywhere in the cause chain) that mean the hub was not reached."""

OFFLINE_WORDS = ("couldn't connect to", "offline mode", "couldn't reach")
"""Phrases of transformers' and datasets' own messages for the same situation."""


def hub_unreachable(exc: BaseException) -> bool:
    """True when ``exc`` (or anything in its ``__cause__`` / ``__context__`` chain) says the hub
    could not be reached, as opposed to a name that does not exist or a broken file."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(cls.__name__ in UNREACHABLE for cls in type(current).__mro__):
            return True
        if any(word in str(current).lower() for word in OFFLINE_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message (library messages run over several lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
