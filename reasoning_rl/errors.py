"""User errors: bad input the user can fix, reported as one short message and exit code 2.

Every error of the input (a malformed config, an unknown key or group option, a missing
dataset field, a corrupt checkpoint, a samples file that does not match its benchmark, ...)
is a :class:`UserError`. Each entry point (``reasoning-rl-train``, ``-eval``, ``-bench``,
``-report``) turns a ``UserError`` into ``<prog>: <message>`` on stderr and exit code
:data:`USER_ERROR_EXIT`, with no traceback; anything else is a bug and keeps its traceback.
``--debug`` on the command line or ``REASONING_RL_DEBUG=1`` shows the traceback of user
errors too (docs/errors.md).

This module imports nothing of the project, so every layer (``rewards``, ``reasoning_rl``,
``benchmarks``) can derive its errors from it.
"""

from __future__ import annotations

import os

USER_ERROR_EXIT = 2
"""Exit code of a command stopped by bad input."""

DEBUG_ENV = "REASONING_RL_DEBUG"
"""Set to 1 to see the traceback of user errors."""


class UserError(Exception):
    """Bad input, named in the message with what to do; never a bug.

    Subclasses may also derive from a builtin (``KeyError``, ``ValueError``,
    ``FileNotFoundError``) so that existing ``except`` clauses keep working; ``str()`` is
    always the message itself (``KeyError`` alone would quote it)."""

    raised_by_every_rank: bool = False
    """True for an error every data-parallel rank raises at the same point (a health rule of
    ``trainer.health.stop_on`` reading the same global metrics): the ranks then leave together, after a
    barrier, so that torchrun does not stop rank 0 while it records the error."""

    def __str__(self) -> str:
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return self.args[0]
        return super().__str__()


def debug_enabled() -> bool:
    """True when tracebacks of user errors are wanted (``REASONING_RL_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


class StorageError(UserError, OSError):
    """A file or folder that cannot be written or read: a full disk, a read-only file system, no
    permission, a path through a file. The message names the path and what to do."""
