"""How every command reports bad input: ``<prog>: <message>`` on stderr, exit code 2, no traceback.

``reasoning-rl-train``, ``-eval``, ``-bench`` and ``-report`` all go through :func:`as_user_error`,
which decides what is the user's to fix and words it:

- a :class:`~reasoning_rl.errors.UserError` (config, data, definitions, algorithms, verifiers,
  models, checkpoints, run folders, code execution): its own message;
- Hydra's composition errors (an unknown key, a value of the wrong type, an unknown group option,
  an override that does not parse) and OmegaConf's (a required value missing): one line naming
  the key, with "did you mean" or the options to choose from;
- a file system that refuses a write (no space left, read-only, no permission, a path through a
  file) or a file that is not there: one line naming the path and what to do (a
  :class:`~reasoning_rl.errors.StorageError`).

Anything else is a bug and keeps its traceback and exit code 1. ``--debug`` (removed from the
arguments by :func:`pop_debug_flag`) or ``REASONING_RL_DEBUG=1`` prints the traceback of a user
error too, before its message; the exit code stays 2.

Hydra catches every exception of the app itself and exits 1 after printing its own report.
:func:`run_hydra_app` sets ``HYDRA_FULL_ERROR=1`` (Hydra's documented switch that makes it
re-raise) so that the exception reaches this module instead.
"""

from __future__ import annotations

import difflib
import errno
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from typing import Any, NoReturn, TypeVar

from reasoning_rl.config_checks import ConfigError, unknown_key_message
from reasoning_rl.config_renames import renamed_key_message
from reasoning_rl.errors import DEBUG_ENV, USER_ERROR_EXIT, StorageError, UserError, debug_enabled

T = TypeVar("T")

DEBUG_FLAG = "--debug"

_STORAGE_REASONS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "free some space there or write elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free some space there or write elsewhere"),
    errno.EROFS: ("the file system is read-only", "write elsewhere"),
    errno.EACCES: ("permission denied", "make it writable (or readable) or use another path"),
    errno.EPERM: ("operation not permitted", "make it writable (or readable) or use another path"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose a folder path"),
    errno.EISDIR: ("it is a folder, not a file", "give a file path"),
    errno.EEXIST: ("a file of that name is in the way of a folder", "choose a folder path"),
}
"""errno -> (what happened, what to do) for the file system errors that are the user's to fix."""

_STORAGE_TEXTS: dict[str, int] = {"No space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC,
                                  "Disk quota exceeded": errno.EDQUOT, "Read-only file system": errno.EROFS,
                                  "os error 30": errno.EROFS}
"""The OS's words for the same errors inside libraries that do not raise OSError (safetensors'
Rust writer, torch's stream writer)."""


def pop_debug_flag(argv: list[str]) -> list[str]:
    """``argv`` without ``--debug``; when it was there, ``REASONING_RL_DEBUG=1`` is set for this
    process and the ones it starts (sweep jobs, workers)."""
    if DEBUG_FLAG in argv:
        os.environ[DEBUG_ENV] = "1"
    return [a for a in argv if a != DEBUG_FLAG]


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def _first_line(text: Any) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def _group_option_message(missing: str, options: list[str] | None) -> str:
    """``task/gsm9k`` with the group's options ->
    ``unknown task option task=gsm9k (did you mean gsm8k?); choose one of: arithmetic, ...``."""
    group, _, name = missing.rpartition("/")
    # The ConfigStore's typed schemas (``grpo_schema``) are listed as options too; they are not choices.
    choices = sorted(o for o in options or [] if not o.endswith("_schema"))
    if not group:
        return f"cannot find the config {missing!r}"
    close = difflib.get_close_matches(name, choices, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    listed = f"; choose one of: {', '.join(choices)}" if choices else ""
    return f"unknown {group} option {group}={name}{hint}{listed}"


def omegaconf_message(exc: Exception) -> str:
    """One line for an OmegaConf error, naming its key."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

    key = getattr(exc, "full_key", None)
    msg = _first_line(getattr(exc, "msg", None) or exc)
    if isinstance(exc, MissingMandatoryValue) and key:
        return f"{key} is required: give {key}=<value> on the command line"
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and key:
        schema = getattr(exc, "object_type", None)
        if isinstance(schema, type) and is_dataclass(schema):
            prefix = key.rpartition(".")[0]
            return unknown_key_message(key, [f.name for f in fields(schema)], f"{prefix}." if prefix else "")
        return f"unknown key {key}"
    if isinstance(exc, ValidationError) and key:
        # an old flat key that is now a group's name (algo.correction=tis): name the new key
        return renamed_key_message(key) or f"bad value for {key}: {msg}"
    return f"{key}: {msg}" if key else msg


def hydra_message(exc: Exception) -> str | None:
    """One line for a Hydra composition or override error; None for any other exception."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, MissingConfigException):
        return _group_option_message(exc.missing_cfg_file or "", exc.options)
    if isinstance(exc, OverrideParseException):
        return (f"cannot parse the override {exc.override!r}: {_one_line(exc.message).split(' See https')[0]} "
                "(override grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)")
    if isinstance(exc, HydraException):
        cause = exc.__cause__
        if isinstance(cause, OmegaConfBaseException):
            return omegaconf_message(cause)
        return _one_line(exc)
    if isinstance(exc, OmegaConfBaseException):
        return omegaconf_message(exc)
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from (``raise ... from``); not what it was raised while handling."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def storage_error(exc: BaseException, where: str, folder: str | os.PathLike | None = None) -> StorageError | None:
    """A :class:`StorageError` when ``exc`` (or what caused it) is a file system refusing a read or
    write that the user can fix; ``where`` says how to choose another place (``trainer.output_dir=...``),
    ``folder`` is named when the error itself carries no path (a library's "No space left on device")."""
    unnamed = f"cannot write to {folder}" if folder is not None else "cannot write"
    for err in _chain(exc):
        if isinstance(err, OSError) and err.errno in _STORAGE_REASONS:
            if err.errno in (errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EEXIST) and not err.filename:
                continue  # without a path these may be anything (a socket, a process): not worded as storage
            reason, todo = _STORAGE_REASONS[err.errno]
            path = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 else "") if err.filename else None
            what = f"cannot use {path}: {reason}" if path else f"{unnamed}: {reason}"
            return StorageError(f"{what}; {todo} ({where})")
        if not isinstance(err, OSError):
            text = str(err)
            for words, code in _STORAGE_TEXTS.items():
                if words in text:
                    reason, todo = _STORAGE_REASONS[code]
                    return StorageError(f"{unnamed}: {reason} ({_first_line(text)[:200]}); {todo} ({where})")
    return None


def as_user_error(exc: BaseException, where: str = "another output folder",
                  folder: str | os.PathLike | None = None) -> UserError | None:
    """The user error ``exc`` stands for, worded for one line; None when it is a bug. ``where``
    and ``folder``: see :func:`storage_error`."""
    message = hydra_message(exc) if isinstance(exc, Exception) else None
    if message is not None:
        return ConfigError(message)
    if isinstance(exc, UserError):
        return exc
    stored = storage_error(exc, where, folder)
    if stored is not None:
        return stored
    if isinstance(exc, FileNotFoundError):
        return StorageError(f"{exc.filename}: no such file or folder" if exc.filename else str(exc))
    return None


def report_user_error(prog: str, error: UserError, original: BaseException | None = None) -> int:
    """Print ``<prog>: <message>`` on stderr (the traceback first under ``--debug``); the exit code 2."""
    if debug_enabled():
        shown = original if original is not None else error
        traceback.print_exception(type(shown), shown, shown.__traceback__, file=sys.stderr)
    print(f"{prog}: {error}", file=sys.stderr, flush=True)
    return USER_ERROR_EXIT


def exit_with(prog: str, error: UserError, original: BaseException | None = None) -> NoReturn:
    """:func:`report_user_error`, then exit with code 2."""
    raise SystemExit(report_user_error(prog, error, original))


@contextmanager
def user_errors_exit(prog: str, where: str, folder: str | os.PathLike | None = None) -> Iterator[None]:
    """Inside this block a user error ends the program as :func:`report_user_error` says;
    any other exception passes through unchanged. ``where``, ``folder``: see :func:`storage_error`."""
    try:
        yield
    except Exception as exc:
        error = as_user_error(exc, where, folder)
        if error is None:
            raise
        exit_with(prog, error, exc)


def is_multirun() -> bool:
    """Whether this process runs one job of a Hydra sweep (``--multirun``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def run_hydra_app(prog: str, where: str, app: Callable[[], T]) -> T:
    """Run a ``@hydra.main`` app so that its composition errors and user errors end in one line and
    exit code 2: ``--debug`` is taken out of ``sys.argv`` (Hydra's parser would refuse it) and
    ``HYDRA_FULL_ERROR=1`` makes Hydra re-raise instead of printing its report and exiting 1."""
    sys.argv[1:] = pop_debug_flag(sys.argv[1:])
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        with user_errors_exit(prog, where):
            return app()
    finally:  # the app may run inside a longer-lived process (tests, notebooks)
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
