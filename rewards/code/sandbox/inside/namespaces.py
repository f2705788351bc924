"""Jail set-up done from inside the jail: Linux constants, libc, the ``unshare`` level's private
mounts and the PID-namespace probe. The command lines that build each isolation level are in
:mod:`rewards.code.sandbox.jail`; this is the part of that set-up that runs in the zygote.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

CLONE_NEWPID = 0x20000000
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36


def load_libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def raw_fork() -> int:
    """fork(2) straight from libc, without Python's at-fork machinery (0 in the child, as os.fork).

    ``os.fork()`` runs, in every child, the ``register_at_fork`` handlers of the modules the parent
    imported -- ``threading`` re-creates its locks and thread table, ``random`` reseeds -- and
    re-initialises the interpreter's thread state. In a parent that never started a thread all of
    that is a no-op in effect, yet it touched ~180 copy-on-write pages and cost ~0.9 ms of CPU per
    child on the machine we measure on, more than the rest of the fork. Only for a parent that has
    ONE thread (the program server P); the GIL stays held across the call (PyDLL), as in os.fork.
    """
    pid = _fork()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return pid


_fork = ctypes.PyDLL(None, use_errno=True).fork
_fork.restype = ctypes.c_int
_fork.argtypes = ()


def parents(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b']."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _world_traversable(path: str) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in [*parents(path), path])


def private_mounts(python_roots: list[str]) -> None:
    """``unshare`` level, inside the new mount namespace: private tmpfs on /tmp, /var/tmp and
    /dev/shm; a Python installation under a private home is re-exposed (and the rest of that
    home hidden) by binding it into a fresh world-traversable tmpfs over the home's top folder."""

    def mount(*args: str) -> None:
        # posix_spawn, not subprocess: subprocess imports threading, and the zygote forks P
        # (and P every C) without threading's at-fork handlers (raw_fork).
        pid = os.posix_spawnp("mount", ["mount", *args], os.environ)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise OSError(f"mount {' '.join(args)} failed (exit status {os.waitstatus_to_exitcode(status)})")

    hidden = [r for r in python_roots if not _world_traversable(r)]
    staged = []
    if hidden:
        stage = "/dev/.rl-python"  # outside every folder about to be covered
        os.makedirs(stage, exist_ok=True)
        for i, root in enumerate(hidden):
            os.makedirs(f"{stage}/{i}", exist_ok=True)
            mount("--bind", root, f"{stage}/{i}")
            staged.append((f"{stage}/{i}", root))
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(path):
            mount("-t", "tmpfs", "-o", f"size={256 << 20},mode=0755", "tmpfs", path)
    for top in sorted({"/" + r.strip("/").split("/")[0] for _, r in staged}):
        mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", top)
    for source, root in staged:
        os.makedirs(root, exist_ok=True)
        for parent in parents(root):
            os.chmod(parent, 0o755)
        mount("--bind", "-o", "ro", source, root)


def pidns_works(libc: Any) -> bool:
    try:
        fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
    except OSError:
        return False
    try:
        if libc.setns(fd, CLONE_NEWPID) != 0 or libc.unshare(CLONE_NEWPID) != 0:
            return False
        pid = os.fork()
        if pid == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        _, status = os.waitpid(pid, 0)
        libc.setns(fd, CLONE_NEWPID)
        return os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)
