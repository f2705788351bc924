"""Atomic writes: a crash or a kill never leaves a half-written file or folder behind.

A file is written to a unique temporary name in the same folder, flushed to disk and
``os.replace``-d onto its name (atomic on POSIX); a folder is filled under a temporary
name and renamed into place. The one implementation, used by checkpoints, run
summaries and evaluation results alike.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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

