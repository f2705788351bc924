"""Jail set-up done from inside the jail: Linux constants, libc, the ``unshare`` level's private
mounts and the PID-namespace probe. The command lines that build each isolation level are in
:mod:`rewards.code.sandbox.jail`; this is the part of that set-up that runs in the zygote.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from typing import Any

CLONE_NEWPID = 0x20000000
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36


def load_libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


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
        subprocess.run(["mount", *args], check=True)

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
