"""Atomic writes: a crash or a kill never leaves a half-written file or folder behind.

A file is written to a unique temporary name in the same folder, flushed to disk and
``os.replace``-d onto its name (atomic on POSIX); a folder is filled under a temporary
name and renamed into place. The one implementation, used by checkpoints, run
summaries and evaluation results alike.

A write the file system refuses for want of space is reported as a full disk naming the path
(:func:`full_disk_error`, a :class:`~reasoning_rl.errors.StorageError`: one line, exit code 2),
however the library that was writing phrases it (``OSError`` ENOSPC, safetensors' "No space left
on device (os error 28)", torch's "unexpected pos 3536576 vs 3536464" / "file write failed"). The
free space is measured before the unfinished temporary file or folder is removed, while the disk
is still as full as the write found it.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from reasoning_rl.errors import StorageError, UserError

SHORT_WRITE = ("no space left", "disk quota", "unexpected pos", "file write failed")
"""How writers say that the file system took less than they wrote (lower case): the OS's ENOSPC and
EDQUOT texts, and torch's zip writer (``PytorchStreamWriter``), which reports a short write only as
"unexpected pos A vs B" or "file write failed"."""


def full_disk_error(path: str | Path, exc: BaseException) -> StorageError | None:
    """A :class:`StorageError` naming ``path`` and its disk's free space when ``exc`` is a write the
    file system refused for space (ENOSPC, EDQUOT or a text of :data:`SHORT_WRITE`); None otherwise
    (any other error, or one already worded for the user)."""
    if not isinstance(exc, Exception) or isinstance(exc, UserError):
        return None
    by_errno = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not by_errno and not any(text in str(exc).lower() for text in SHORT_WRITE):
        return None
    try:
        free = f"{shutil.disk_usage(Path(path).parent).free} bytes free there"
    except OSError:
        free = "free space unknown"
    said = " ".join(str(exc).split())[:160]
    return StorageError(f"cannot write {path}: its disk is full ({free}; the write failed with {type(exc).__name__}: "
                        f"{said}); free some space there or write elsewhere")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the mode open() would
        os.replace(tmp, path)
    except BaseException as exc:
        full = full_disk_error(path, exc)  # measured before the partial file is removed
        Path(tmp).unlink(missing_ok=True)
        if full is not None:
            raise full from exc
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_directory_write(final: str | Path, write: Callable[[Path], None]) -> Path:
    """Run ``write(tmp_dir)`` then rename ``tmp_dir`` to ``final`` (replacing an old one).

    The folder is filled under ``.<name>.tmp`` next to ``final``. When ``write`` raises (a full
    disk, an interrupt, any exception) the temporary folder is removed and the error propagates:
    nothing is left behind and an old ``final`` is untouched. Replacing an old ``final`` takes two
    renames (old aside to ``.<name>.old``, new in); should the second fail, the old one is put
    back. A process killed between the two leaves only ``.<name>.old``: the next call for the same
    ``final`` restores it before writing, so a complete folder is never lost.
    """
    final = Path(final)
    tmp = final.parent / f".{final.name}.tmp"
    old = final.parent / f".{final.name}.old"
    if old.exists() and not final.exists():
        os.replace(old, final)  # a kill between the two renames of an earlier call
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        write(tmp)
        if not final.exists():
            os.replace(tmp, final)
            return final
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            os.replace(old, final)
            raise
    except BaseException as exc:
        full = full_disk_error(final, exc)  # measured before the unfinished folder is removed
        shutil.rmtree(tmp, ignore_errors=True)
        if full is not None:
            raise full from exc
        raise
    shutil.rmtree(old)
    return final


def recover_directory_writes(parent: str | Path, prefix: str = "") -> list[str]:
    """Tidy what killed :func:`atomic_directory_write` calls left in ``parent`` (for folder names
    starting with ``prefix``): a ``.<name>.tmp`` is a write that never finished and is removed; a
    ``.<name>.old`` without ``<name>`` is a complete folder set aside by a call killed between its
    two renames, and is put back. Returns what was done, one line each, for the log."""
    parent, done = Path(parent), []
    if not parent.is_dir():
        return done
    for path in sorted(parent.iterdir()):
        name = path.name
        if not (path.is_dir() and name.startswith(f".{prefix}")):
            continue
        if name.endswith(".tmp"):
            shutil.rmtree(path)
            done.append(f"removed the unfinished write {path}")
        elif name.endswith(".old") and not (final := parent / name[1:-len(".old")]).exists():
            os.replace(path, final)
            done.append(f"restored {final} from {path}")
    return done

