"""Jail construction: the isolation levels and the command line that builds each one.

Strongest first: ``bwrap`` (bubblewrap: an empty root with the OS libraries and the Python
installation bound read-only), ``unshare`` (util-linux: the same namespaces over the host's
filesystem), ``rlimits`` (no namespaces; loud warning). :func:`detect_isolation` picks the
strongest that works here; :func:`command` builds the argv that starts a program in the jail;
:func:`zygote_command` the argv that starts the zygote. The part of the set-up that runs inside
the new namespaces is :mod:`.inside.namespaces`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from typing import Literal

from .inside.namespaces import parents
from .results import SandboxError

IsolationLevel = Literal["bwrap", "unshare", "rlimits"]
LEVELS: tuple[IsolationLevel, ...] = ("bwrap", "unshare", "rlimits")
ENV_LEVEL = "REASONING_RL_SANDBOX"

INSIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inside")
"""The stdlib-only package that runs in the jail; bound read-only at /sandbox/inside under bwrap."""
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from inside.zygote import main; main()"
"""The zygote's ``-c`` program: import the ``inside`` package from ROOT (argv[1]) and start Z."""

_probe_cache: dict[str, bool] = {}
_warned_rlimits = False


def python() -> str:
    return os.path.realpath(sys.executable)


def _bwrap_command(argv_tail: list[str], is_root: bool) -> list[str]:
    cmd = ["bwrap", "--die-with-parent", "--new-session", "--clearenv"]
    # An empty root with only what Python needs, read-only: no repository, no datasets, no $HOME.
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/usr"):
        if os.path.islink(top):
            cmd += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            cmd += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf"):
        cmd += ["--ro-bind-try", path, path]
    # The private /tmp first: a Python installed under /tmp (a virtual environment there) is bound on top
    # of it below, so its site-packages stay visible instead of being hidden by the tmpfs.
    cmd += ["--dev", "/dev", "--proc", "/proc", "--size", str(256 << 20), "--tmpfs", "/tmp"]
    made: set[str] = set()
    for root in python_roots():
        # The Python installation may live under a private home (/root/.pyenv): its parents are
        # recreated world-traversable so that C, running as another uid, can import the stdlib.
        for parent in parents(root):
            if parent not in made and not os.path.islink(parent):
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", root, root]
    cmd += ["--ro-bind", INSIDE, "/sandbox/inside"]
    cmd += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if is_root:
        # No user namespace as root: a user namespace maps one uid only, and C must drop to
        # another uid so that RLIMIT_NPROC applies and it cannot signal or trace Z or P.
        for cap in ("SETUID", "SETGID", "SYS_ADMIN", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"):
            cmd += ["--cap-add", f"CAP_{cap}"]
    else:
        cmd += ["--unshare-user"]
    cmd += ["--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--chdir", "/tmp", "--"]
    return cmd + argv_tail


def python_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    roots.add(os.path.dirname(os.path.dirname(python())))
    ordered = sorted(roots, key=len)
    return [r for i, r in enumerate(ordered) if not any(r.startswith(o.rstrip("/") + "/") for o in ordered[:i])]


def _unshare_command(argv_tail: list[str], is_root: bool) -> list[str]:
    cmd = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc", "--uts", "--mount-proc"]
    if not is_root:
        cmd += ["--user", "--map-root-user"]
    return [*cmd, "--", *argv_tail]


def command(level: IsolationLevel, argv_tail: list[str]) -> list[str]:
    is_root = os.geteuid() == 0
    if level == "bwrap":
        return _bwrap_command(argv_tail, is_root)
    if level == "unshare":
        return _unshare_command(argv_tail, is_root)
    return argv_tail


def zygote_command(level: IsolationLevel, config: str) -> list[str]:
    """The argv that starts the zygote Z at ``level``; ``config`` is its JSON configuration."""
    root = "/sandbox" if level == "bwrap" else os.path.dirname(INSIDE)
    # -B: the jail never writes bytecode next to its own sources (the repository at `unshare`).
    # -S: no `site` and no .pth files run in the jail; Z adds the site-packages folders itself
    # (config "site_dirs", :func:`site_dirs`). Not at `rlimits`, where C can import only what Z
    # loaded when Python lives under a private home (inside/zygote.py, _PREIMPORT_RLIMITS).
    flags = ["-I", "-S", "-B"] if level in ("bwrap", "unshare") else ["-I", "-B"]
    return command(level, [python(), *flags, "-c", BOOT, root, config])


def site_dirs() -> list[str]:
    """This interpreter's site-packages folders, importable by programs in the jail. Their .pth
    files are not processed (the zygote runs with -S): a package that only a .pth file puts on the
    path (an editable install, an old-style namespace package) is not importable there."""
    import site

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def _level_works(level: IsolationLevel) -> bool:
    if level == "rlimits":
        return True
    if level not in _probe_cache:
        tool = "bwrap" if level == "bwrap" else "unshare"
        ok = shutil.which(tool) is not None and sys.platform.startswith("linux")
        if ok:
            cmd = command(level, [python(), "-I", "-c", "pass"])
            try:
                ok = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, timeout=20, env=clean_env()).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
        _probe_cache[level] = ok
    return _probe_cache[level]


def detect_isolation(prefer: str | None = None) -> IsolationLevel:
    """The strongest level that works here, or ``prefer`` (or ``$REASONING_RL_SANDBOX``) if set.

    A forced level that does not work raises :class:`SandboxError`; falling back to
    ``rlimits`` warns loudly (once per process).
    """
    global _warned_rlimits
    wanted = prefer or os.environ.get(ENV_LEVEL) or None
    if wanted is not None:
        if wanted not in LEVELS:
            raise SandboxError(f"unknown isolation level {wanted!r}; choose one of {LEVELS}")
        if not _level_works(wanted):  # type: ignore[arg-type]
            raise SandboxError(f"isolation level {wanted!r} does not work on this machine "
                               f"(install bubblewrap: apt-get install -y bubblewrap)")
        return wanted  # type: ignore[return-value]
    for level in LEVELS:
        if _level_works(level):
            if level == "rlimits" and not _warned_rlimits:
                _warned_rlimits = True
                warnings.warn(
                    "CODE SANDBOX RUNS WITHOUT NAMESPACES (neither bwrap nor unshare works here): untrusted "
                    "programs can reach the network and read world-readable files"
                    + ("" if os.geteuid() == 0 else ", and -- not running as root -- signal every process of "
                       "this user") + ". Install bubblewrap (apt-get install -y bubblewrap).",
                    RuntimeWarning, stacklevel=2)
            return level
    raise AssertionError("unreachable")


def clean_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
