"""The trust boundary: every untrusted program in reasoning-rl runs through this module.

Nothing else in the repository executes model-written code. This file is stdlib-only
because it is also the program the sandbox runs (``python -I sandbox.py --zygote``).

Process layout (one "sandbox" per host worker, started once and reused)::

    host (verifier) --pipe--> Z  zygote inside bwrap/unshare; holds the tests and runs the trusted
                              |  harness (prompt helpers, check(), assert lines) -- never user code
                              `-- P  program server, forked from Z BEFORE any test was read
                                  `-- C  candidate: ONE fresh process per program, forked "warm"
                                         (pid 1 of its own PID namespace) before its program is
                                         known, then: fresh uid, rlimits, the program

The harness talks to C over a private socket pair: it calls C's functions with plain-data
arguments and decodes the plain-data results with trusted code; the assertions, the
comparisons and the verdict happen in Z. C receives only the program (and, for stdin/stdout
tests, its input); it never holds a test, an expected value or a channel to the host.

Isolation levels (:func:`detect_isolation`, forced with ``isolation=`` or
``$REASONING_RL_SANDBOX``), strongest first:

* ``bwrap``  -- bubblewrap: new mount, PID, network, IPC, UTS (and cgroup) namespaces; the
  root filesystem is an empty tmpfs with only the OS libraries and the Python installation
  bound read-only (the repository, datasets and home directories are NOT visible); a
  private size-capped ``/tmp``; no network devices but loopback; ``--die-with-parent``,
  ``--new-session``, ``--clearenv``.
* ``unshare`` -- util-linux ``unshare``: the same namespaces, a private tmpfs ``/tmp``,
  ``/var/tmp`` and ``/dev/shm`` (a Python installed under a private home is re-bound into a
  fresh tmpfs over that home); the rest of the filesystem is visible to C through ordinary
  permissions only (C runs as an unprivileged uid when we are root).
* ``rlimits`` -- no namespaces. Loud warning. Resource limits, a fresh uid and a clean
  environment only: the network and world-readable files ARE reachable. (If Python lives
  under a private home, C can import only the modules the zygote preloaded.)

Protected at every level (each has an adversarial test in tests/rewards/code/):

* the verdict: C never sees the tests or the expected values (P was forked before any test
  was read, the harness is another process); C's only output that matters is the plain data
  its functions return, decoded by trusted code in Z. Exit codes and stdout never decide a
  functional test (stdin/stdout tests compare stdout in Z and also require exit status 0).
  ``sys.exit``/``os._exit``, ``raise SystemExit``/``BaseException``, patched
  ``AssertionError``/builtins/``check``, ``sys.settrace`` hooks, objects whose ``__eq__``
  always returns True, fake "passed" markers: all happen in C's interpreter, which runs no
  assertion. Builtins and the prompt's helpers used by the tests are Z's, never C's.
* secrets: the zygote is a fresh interpreter (not a fork of the caller) with a clean
  environment; the trusted processes are non-dumpable, so C cannot read their memory or
  file descriptors through /proc or ptrace; at ``bwrap`` the repository, datasets and home
  directories are not even mounted.
* the host: C runs as a random unprivileged uid (when the host runs as root; C refuses to
  run as root outside its own PID namespace), so it can neither signal nor trace Z, P or
  the caller; rlimits bound its memory (RLIMIT_AS), CPU time, file sizes, open files and
  processes (RLIMIT_NPROC, per uid); stdout/stderr go to files capped by RLIMIT_FSIZE.
* clean-up: C is pid 1 of its own PID namespace (bwrap, unshare), so killing it kills
  every process it started, daemonised or not; without namespaces every process of its
  uid is killed (as root), or -- same uid as the caller -- its process group and every
  process re-parented to P (P is their subreaper). Its working directory is deleted.
* time: a wall-clock deadline enforced from outside (P kills C, the harness stops waiting,
  the host kills the whole sandbox if Z does not answer); RLIMIT_CPU as a backstop.

Not protected:

* a kernel exploit (no seccomp filter; use a VM for that threat model);
* at ``unshare``/``rlimits``: files readable by any user; at ``rlimits``: the network,
  abstract unix sockets, world-writable folders (/tmp, /var/tmp), and -- when the host is
  not root -- the caller's other processes (same uid, so ``kill(-1)`` reaches them);
* the candidate's own interpreter: a program may patch anything in C (it is its own
  process) -- which changes nothing but the plain values it returns;
* side channels between programs running at the same time (CPU, memory pressure);
* a program that prints the right answer for stdin/stdout tests by reading its input
  (that is solving the task) or that hard-codes the test cases it was shown.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

IsolationLevel = Literal["bwrap", "unshare", "rlimits"]
LEVELS: tuple[IsolationLevel, ...] = ("bwrap", "unshare", "rlimits")
ExecStatus = Literal["passed", "failed", "timeout", "error"]
ENV_LEVEL = "REASONING_RL_SANDBOX"

_MAX_FRAME = 64 << 20  # a larger message from the sandbox is a protocol error
_CLONE_NEWPID = 0x20000000
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36


# =============================================================================================
# Types shared by both sides
# =============================================================================================
@dataclass(frozen=True)
class Limits:
    """Resource limits of ONE candidate process (each stdin/stdout case gets its own)."""

    memory_mb: int = 1024
    """RLIMIT_AS (address space) in MiB; an allocation beyond it raises MemoryError."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE in MiB: the largest file (stdout and stderr included) C may write."""
    max_processes: int = 32
    """RLIMIT_NPROC: processes + threads of C's uid (enforced when the host runs as root)."""
    max_open_files: int = 64
    """RLIMIT_NOFILE."""
    output_tail_bytes: int = 2000
    """How much of the end of stdout/stderr is kept in the result."""
    max_output_bytes: int = 8 << 20
    """stdin/stdout tests: at most this much of a case's stdout is compared."""


@dataclass(frozen=True)
class ExecutionResult:
    """What running one program against its tests gave.

    ``status``: ``passed`` (every test passed), ``failed`` (the program ran, a test failed),
    ``timeout`` (the wall-clock deadline passed), ``error`` (the program could not be loaded
    or its process died: syntax error, exception at import, memory limit, killed itself).
    ``harness_error`` is set when the TESTS could not run (bad dataset row): the program is
    then not to blame and the verifier reports the sample as unscorable.
    """

    status: ExecStatus
    passed: int
    total: int
    duration: float
    stdout: str = ""
    stderr: str = ""
    detail: str = ""
    isolation: str = ""
    harness_error: str | None = None
    cases: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class SandboxError(RuntimeError):
    """The sandbox itself could not start or broke (not the program's fault)."""


# =============================================================================================
# Framing: 4-byte big-endian length + JSON, on pipes (host <-> Z) and sockets (Z, P, C)
# =============================================================================================
def _pack(obj: Any) -> bytes:
    data = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(data)) + data


def _write_frame(fd: int, obj: Any) -> None:
    data = memoryview(_pack(obj))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact_fd(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None = None) -> Any:
    """Next message from ``fd``; None at end of file; TimeoutError past ``deadline``."""
    head = _read_exact_fd(fd, 4, deadline)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > _MAX_FRAME:
        raise ValueError(f"message of {size} bytes exceeds the {_MAX_FRAME}-byte limit")
    body = _read_exact_fd(fd, size, deadline)
    if body is None:
        return None
    return json.loads(body)


def _sock_send(sock: socket.socket, obj: Any, fds: Sequence[int] = ()) -> None:
    data = _pack(obj)
    if fds:
        socket.send_fds(sock, [data[:4]], list(fds))
        sock.sendall(data[4:])
    else:
        sock.sendall(data)


def _sock_recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _sock_recv(sock: socket.socket, with_fds: bool = False) -> Any:
    """Next message (and received fds when ``with_fds``); None at end of stream."""
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, 4)
        if len(head) < 4:
            rest = _sock_recv_exact(sock, 4 - len(head)) if head else None
            if rest is None:
                return (None, fds) if with_fds else None
            head += rest
    else:
        head = _sock_recv_exact(sock, 4)
        if head is None:
            return None
    (size,) = struct.unpack(">I", head)
    if size > _MAX_FRAME:
        raise ValueError(f"message of {size} bytes exceeds the {_MAX_FRAME}-byte limit")
    body = _sock_recv_exact(sock, size)
    msg = None if body is None else json.loads(body)
    return (msg, fds) if with_fds else msg


# =============================================================================================
# Host side: choose a level, start sandboxes, run jobs
# =============================================================================================
_probe_cache: dict[str, bool] = {}
_warned_rlimits = False


def _python() -> str:
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
    made: set[str] = set()
    for root in _python_roots():
        # The Python installation may live under a private home (/root/.pyenv): its parents are
        # recreated world-traversable so that C, running as another uid, can import the stdlib.
        for parent in _parents(root):
            if parent not in made and not os.path.islink(parent):
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", parent]
        cmd += ["--ro-bind", root, root]
    cmd += ["--dev", "/dev", "--proc", "/proc", "--size", str(256 << 20), "--tmpfs", "/tmp"]
    cmd += ["--ro-bind", os.path.abspath(__file__), "/sandbox/sandbox.py"]
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


def _python_roots() -> list[str]:
    roots = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)}
    roots.add(os.path.dirname(os.path.dirname(_python())))
    ordered = sorted(roots, key=len)
    return [r for i, r in enumerate(ordered) if not any(r.startswith(o.rstrip("/") + "/") for o in ordered[:i])]


def _parents(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b']."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _world_traversable(path: str) -> bool:
    return all(os.stat(p).st_mode & 0o001 for p in [*_parents(path), path])


def _unshare_command(argv_tail: list[str], is_root: bool) -> list[str]:
    cmd = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc", "--uts", "--mount-proc"]
    if not is_root:
        cmd += ["--user", "--map-root-user"]
    return [*cmd, "--", *argv_tail]


def _command(level: IsolationLevel, argv_tail: list[str]) -> list[str]:
    is_root = os.geteuid() == 0
    if level == "bwrap":
        return _bwrap_command(argv_tail, is_root)
    if level == "unshare":
        return _unshare_command(argv_tail, is_root)
    return argv_tail


def _level_works(level: IsolationLevel) -> bool:
    if level == "rlimits":
        return True
    if level not in _probe_cache:
        tool = "bwrap" if level == "bwrap" else "unshare"
        ok = shutil.which(tool) is not None and sys.platform.startswith("linux")
        if ok:
            cmd = _command(level, [_python(), "-I", "-c", "pass"])
            try:
                ok = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, timeout=20, env=_clean_env()).returncode == 0
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


def _clean_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


class _Launcher:
    """Starts sandbox processes from ONE thread that lives as long as this process.

    ``bwrap --die-with-parent`` uses PR_SET_PDEATHSIG, which fires when the *thread* that
    forked bwrap exits: a sandbox started from a short-lived worker thread would be killed
    with it.
    """

    def __init__(self) -> None:
        self._pid = -1
        self._lock = threading.Lock()
        self._queue: Any = None

    def popen(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        import queue
        from concurrent.futures import Future

        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child (threads do not survive fork)
                self._pid = os.getpid()
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(self._queue,), name="sandbox-launcher",
                                 daemon=True).start()
        done: Future[subprocess.Popen[bytes]] = Future()
        self._queue.put((done, cmd, kwargs))
        return done.result()

    @staticmethod
    def _serve(requests: Any) -> None:
        while True:
            done, cmd, kwargs = requests.get()
            try:
                done.set_result(subprocess.Popen(cmd, **kwargs))
            except BaseException as exc:
                done.set_exception(exc)


_launcher = _Launcher()


class Sandbox:
    """One zygote (Z) inside one isolation layer; runs one job at a time (thread-safe).

    Reused across programs: each program still gets a fresh process C forked inside it.
    """

    def __init__(self, isolation: str | None = None) -> None:
        self.level: IsolationLevel = detect_isolation(isolation)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = -1
        self._errlog: Any = None
        self.info: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def _start(self) -> None:
        # As root, C ALWAYS runs as a fresh uid: without a PID namespace a root C could kill every
        # process on the machine with kill(-1). (At `rlimits`, if Python lives under a private
        # home, C can then import only the modules the zygote preloaded.)
        uid = random.SystemRandom().randrange(1 << 20, 1 << 30) if os.geteuid() == 0 else -1
        config = json.dumps({"level": self.level, "uid": uid, "python_roots": _python_roots()})
        script = "/sandbox/sandbox.py" if self.level == "bwrap" else os.path.abspath(__file__)
        cmd = _command(self.level, [_python(), "-I", script, "--zygote", config])
        self._errlog = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the zygote
        self._proc = _launcher.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog,
                                     env=_clean_env(), start_new_session=True, close_fds=True)
        self._owner_pid = os.getpid()
        try:
            hello = _read_frame(self._proc.stdout.fileno(), time.monotonic() + 30)  # type: ignore[union-attr]
        except (TimeoutError, ValueError, OSError):
            hello = None
        if not hello or hello.get("hello") != "zygote":
            err = self._stderr_text()
            self._kill()
            raise SandboxError(f"the {self.level} sandbox did not start: {err[-2000:]}")
        self.info = hello

    def _stderr_text(self) -> str:
        if self._errlog is None:
            return ""
        self._errlog.seek(0)
        return self._errlog.read().decode(errors="replace")

    def _kill(self, grace: float = 0.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and self._owner_pid == os.getpid():
            if grace > 0:  # end of input: the zygote leaves its loop and removes its directory
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # type: ignore[union-attr]
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(grace)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]

    def close(self) -> None:
        with self._lock:
            self._kill(grace=1.0)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------------------------
    def ensure_started(self) -> dict[str, Any]:
        """Start the zygote now if needed; its hello (level, uid of C, PID namespace)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None or self._owner_pid != os.getpid():
                self._proc = None if self._owner_pid != os.getpid() else self._proc
                self._kill()
                self._start()
            return self.info

    def execute(self, job: Mapping[str, Any]) -> ExecutionResult:
        """Run one job (from ``FunctionalTests.job`` / ``StdioTests.job``) in this sandbox."""
        return _result_from_reply(self.run(job, _budget(job)), self.level)

    def run(self, job: Mapping[str, Any], budget: float) -> dict[str, Any]:
        """Send one job; its reply, or a synthetic ``error`` reply if the sandbox died or hung.

        ``budget``: seconds after which the whole sandbox is killed and restarted.
        """
        with self._lock:
            if self._proc is not None and self._owner_pid != os.getpid():
                self._proc = None  # inherited through fork: that zygote belongs to our parent
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                self._start()
            assert self._proc is not None and self._proc.stdin and self._proc.stdout
            try:
                _write_frame(self._proc.stdin.fileno(), dict(job))
                reply = _read_frame(self._proc.stdout.fileno(), time.monotonic() + budget)
            except TimeoutError:
                self._kill()
                return {"status": "timeout", "detail": f"the sandbox gave no answer within {budget:g}s; "
                        "it was killed and will be restarted"}
            except (OSError, ValueError) as exc:
                reply, why = None, repr(exc)
            else:
                why = "end of stream"
            if reply is None:
                err = self._stderr_text()[-1000:]
                self._kill()
                return {"status": "error", "detail": f"the sandbox died while running this program ({why}) {err}"}
            return reply


def _result_from_reply(reply: Mapping[str, Any], level: str) -> ExecutionResult:
    return ExecutionResult(
        status=reply.get("status", "error"),
        passed=int(reply.get("passed", 0)),
        total=int(reply.get("total", 0)),
        duration=float(reply.get("duration", 0.0)),
        stdout=reply.get("stdout", ""),
        stderr=reply.get("stderr", ""),
        detail=reply.get("detail", ""),
        isolation=level,
        harness_error=reply.get("harness_error"),
        cases=tuple(reply.get("cases", ())),
    )


def _budget(job: Mapping[str, Any]) -> float:
    if job["mode"] == "stdio":
        return float(job["case_timeout"]) * max(1, len(job["cases"])) + 10.0
    return float(job["timeout"]) + 10.0


def default_workers() -> int:
    """Two sandboxes per core: a functional job alternates between the harness and the candidate
    (one core busy at a time) and waits on forks and exits, so one per core leaves cores idle."""
    return 2 * len(os.sched_getaffinity(0))


class SandboxPool:
    """``num_workers`` sandboxes, fed by as many threads: runs many jobs in parallel."""

    def __init__(self, num_workers: int | None = None, isolation: str | None = None) -> None:
        self.num_workers = max(1, num_workers or default_workers())
        self.level = detect_isolation(isolation)
        self._free: list[Sandbox] = [Sandbox(self.level) for _ in range(self.num_workers)]
        self._cond = threading.Condition()
        self._closed = False

    def run(self, job: Mapping[str, Any]) -> ExecutionResult:
        with self._cond:
            while not self._free:
                self._cond.wait()
            box = self._free.pop()
        try:
            return _result_from_reply(box.run(job, _budget(job)), self.level)
        finally:
            with self._cond:
                self._free.append(box)
                self._cond.notify()

    def run_many(self, jobs: Sequence[Mapping[str, Any]]) -> list[ExecutionResult]:
        if not jobs:
            return []
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.num_workers) as ex:
            return list(ex.map(self.run, jobs))

    def close(self) -> None:
        with self._cond:
            for box in self._free:
                box.close()
            self._closed = True


# =============================================================================================
# Inside the sandbox: the zygote Z
# =============================================================================================
_PREIMPORT = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "typing",
              "random", "statistics", "fractions", "decimal", "operator", "copy", "hashlib", "datetime",
              "array", "numbers", "dataclasses", "enum", "abc", "io", "cmath", "textwrap", "ast", "resource",
              "glob", "fnmatch", "queue", "pprint")


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _zygote_main(config: dict[str, Any]) -> None:
    # The protocol pipes move to high fds; fd 0 becomes /dev/null and fd 1 stderr, so a stray
    # print in our own code cannot corrupt the protocol.
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    for name in _PREIMPORT:
        with contextlib.suppress(ImportError):
            __import__(name)
    libc = _libc()
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no /proc/<pid>/mem, fd or ptrace access from C
    level = config["level"]
    if level == "unshare":
        _private_mounts(config["python_roots"])
    if level in ("bwrap", "unshare"):
        with contextlib.suppress(OSError):
            os.chmod("/tmp", 0o755)  # C may write its own directory only
    base = tempfile.mkdtemp(prefix="rl-sandbox-")
    os.chmod(base, 0o711)
    uid = int(config["uid"])
    can_drop = uid > 0 and os.geteuid() == 0
    pidns = level in ("bwrap", "unshare") and _pidns_works(libc)
    z_sock, p_sock = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # P: forked before any test was read, so C (forked from P) never holds one
        z_sock.close()
        os.close(rfd)
        os.close(wfd)
        try:
            _program_server(p_sock, base, uid if can_drop else -1, pidns)
        finally:
            os._exit(0)
    p_sock.close()
    _write_frame(wfd, {"hello": "zygote", "level": level, "uid": uid if can_drop else None, "pid_namespace": pidns,
                       "python": sys.version.split()[0]})
    try:
        while True:
            job = _read_frame(rfd)
            if job is None:
                break
            try:
                reply = _handle_job(job, z_sock)
            except Exception:
                reply = {"status": "error", "harness_error": "zygote: " + traceback.format_exc(limit=4)}
            _write_frame(wfd, reply)
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break  # P died: exit, and the host starts a fresh sandbox for the next program
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


def _private_mounts(python_roots: list[str]) -> None:
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
        for parent in _parents(root):
            os.chmod(parent, 0o755)
        mount("--bind", "-o", "ro", source, root)


def _pidns_works(libc: Any) -> bool:
    try:
        fd = os.open("/proc/self/ns/pid", os.O_RDONLY)
    except OSError:
        return False
    try:
        if libc.setns(fd, _CLONE_NEWPID) != 0 or libc.unshare(_CLONE_NEWPID) != 0:
            return False
        pid = os.fork()
        if pid == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        _, status = os.waitpid(pid, 0)
        libc.setns(fd, _CLONE_NEWPID)
        return os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)


def _handle_job(job: dict[str, Any], z_sock: socket.socket) -> dict[str, Any]:
    start = time.monotonic()
    limits = job.get("limits", {})
    if job["mode"] == "stdio":
        cases = job["cases"]
        _sock_send(z_sock, {"op": "stdio", "program": job["program"], "limits": limits,
                            "timeout": job["case_timeout"], "inputs": [c["input"] for c in cases]})
        report = _sock_recv(z_sock) or {}
        return _judge_stdio(job, report, time.monotonic() - start)

    # functional: P hands over its end of the warm C's channel; the harness (this process, which
    # never runs user code) tests C's functions through it.
    _sock_send(z_sock, {"op": "functional", "program": job["program"], "limits": limits, "timeout": job["timeout"]})
    handoff, fds = _sock_recv(z_sock, with_fds=True)
    if not handoff or not handoff.get("channel") or not fds:
        return {"status": "error", "harness_error": "the program server did not hand over a channel"}
    w_end = socket.socket(fileno=fds[0])
    try:
        verdict = _harness(w_end, job, start + float(job["timeout"]))
    except Exception:
        verdict = {"harness_error": "harness: " + traceback.format_exc(limit=6)}
    finally:
        w_end.close()
    _sock_send(z_sock, {"op": "stop"})
    report = _sock_recv(z_sock) or {}
    verdict.setdefault("passed", 0)
    verdict.setdefault("total", 0)
    if verdict.get("harness_error"):
        verdict["status"] = "error"
    elif report.get("timed_out") and verdict.get("status") != "passed":
        verdict["status"] = "timeout"
    return {**verdict, "duration": time.monotonic() - start, "stdout": report.get("stdout", ""),
            "stderr": report.get("stderr", ""), "exit": report.get("exit")}


def _normalise_output(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _judge_stdio(job: dict[str, Any], report: dict[str, Any], duration: float) -> dict[str, Any]:
    """Trusted comparison, in Z (which never ran user code): output == expected and a clean exit."""
    runs = report.get("cases", [])
    cases, passed = [], 0
    for i, case in enumerate(job["cases"]):
        run = runs[i] if i < len(runs) else {"status": "error", "stdout": "", "detail": "not run"}
        same = (run.get("status") == "exited" and run.get("exit") == 0 and not run.get("truncated")
                and _normalise_output(run.get("stdout", "")) == _normalise_output(case["output"]))
        passed += same
        cases.append({"passed": bool(same), "status": run.get("status"), "exit": run.get("exit"),
                      "seconds": run.get("seconds", 0.0)})
    total = len(job["cases"])
    if passed == total:
        status = "passed"
    elif any(c["status"] == "timeout" for c in cases):
        status = "timeout"
    elif any(c["status"] != "exited" or c["exit"] != 0 for c in cases):
        status = "error"
    else:
        status = "failed"
    last = runs[-1] if runs else {}
    return {"status": status, "passed": passed, "total": total, "duration": duration, "cases": cases,
            "stdout": last.get("tail", ""), "stderr": last.get("stderr", "")}


# =============================================================================================
# Inside the sandbox: the program server P and the candidate C
# =============================================================================================
class _Warm:
    """A candidate process C forked and locked down BEFORE its program is known.

    Forking and dropping privileges takes milliseconds; doing it while the previous program's
    verdict travels back keeps it off the critical path. C waits on its channel for the job.
    """

    def __init__(self, libc: Any, ns_fd: int, base: str, counter: int, uid: int) -> None:
        self.jobdir = os.path.join(base, f"j{counter}")
        os.mkdir(self.jobdir, 0o711)
        work = os.path.join(self.jobdir, "work")
        os.mkdir(work, 0o700)
        if uid > 0:
            os.chown(work, uid, uid)
        self.paths = {name: os.path.join(self.jobdir, name) for name in ("out", "err")}
        fds = {name: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for name, path in self.paths.items()}
        self.p_end, c_end = socket.socketpair()
        if ns_fd >= 0:  # the next child is pid 1 of a brand-new PID namespace
            libc.setns(ns_fd, _CLONE_NEWPID)
            libc.unshare(_CLONE_NEWPID)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.p_end.close()
                _candidate_main(libc, fds, c_end.fileno(), work, uid)
            finally:
                os._exit(70)
        c_end.close()
        for fd in fds.values():
            os.close(fd)
        self.pidfd = os.pidfd_open(self.pid)
        self.status: int | None = None

    def reap(self, uid: int, pidns: bool) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # pid 1 of its namespace: the kernel kills the rest
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)
        os.close(self.pidfd)
        _kill_leftovers(uid, self.pid, pidns)
        shutil.rmtree(self.jobdir, ignore_errors=True)


def _program_server(sock: socket.socket, base: str, uid: int, pidns: bool) -> None:
    """P: hands each program to a warm C, watches it, reports, cleans up. Never sees a test."""
    import gc

    libc = _libc()
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of C come back to us, not to init
    ns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY) if pidns else -1
    gc.collect()
    gc.freeze()  # C's garbage collector will not touch (and copy) our pages
    counter = 0

    def fresh() -> _Warm:
        nonlocal counter
        counter += 1
        return _Warm(libc, ns_fd, base, counter, uid)

    warm = fresh()
    while True:
        msg, fds = _sock_recv(sock, with_fds=True)
        if msg is None:
            warm.reap(uid, pidns)
            return
        if msg["op"] == "stop":  # a stop for a job that had already finished
            for fd in fds:
                os.close(fd)
            continue
        job = {"program": msg["program"], "limits": msg["limits"], "timeout": float(msg["timeout"])}
        if msg["op"] == "functional":
            c, warm = warm, None
            try:
                _sock_send(c.p_end, {**job, "mode": "functional"})
            except OSError:  # the warm C died before its job: no channel, a fresh C next time
                _sock_send(sock, {"channel": False})
                c.reap(uid, pidns)
                warm = fresh()
                continue
            _sock_send(sock, {"channel": True}, [c.p_end.fileno()])  # the harness talks to C directly
            c.p_end.close()
            run = _watch(c, job, stop_sock=sock, tail=int(job["limits"].get("output_tail_bytes", 2000)))
            _sock_send(sock, run)  # report first, clean up after: off the critical path
            c.reap(uid, pidns)
            warm = fresh()
        else:
            cases = []
            for data in msg["inputs"]:
                c, warm = warm, None
                stdin_path = os.path.join(c.jobdir, "in")
                with open(stdin_path, "w") as f:
                    f.write(data)
                stdin_fd = os.open(stdin_path, os.O_RDONLY)
                _sock_send(c.p_end, {**job, "mode": "stdio"}, [stdin_fd])
                os.close(stdin_fd)
                c.p_end.close()
                cases.append(_watch(c, job, stop_sock=None, tail=int(job["limits"].get("output_tail_bytes", 2000))))
                c.reap(uid, pidns)
                warm = fresh()
            _sock_send(sock, {"cases": cases})


def _watch(c: _Warm, job: dict[str, Any], stop_sock: socket.socket | None, tail: int) -> dict[str, Any]:
    """Wait for C to exit, for a stop from Z, or for the deadline; C is SIGKILLed unless it exited."""
    start = time.monotonic()
    deadline = start + job["timeout"] + 0.25  # the harness's own deadline fires first and reports the timeout
    timed_out = stopped = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        watch = [c.pidfd] + ([stop_sock] if stop_sock is not None else [])
        ready = select.select(watch, [], [], left)[0]
        if c.pidfd in ready:
            _, c.status = os.waitpid(c.pid, 0)
            break
        if stop_sock is not None and stop_sock in ready:
            stopped = True  # the harness has its verdict; nothing C does from now on matters
            break
    if c.status is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(c.pid, signal.SIGKILL)
    if stopped:
        msg = _sock_recv(stop_sock)  # type: ignore[arg-type]
        assert msg is not None and msg["op"] == "stop", msg
    if stop_sock is None and c.status is None:  # stdio: the exit status is part of the verdict
        _, c.status = os.waitpid(c.pid, 0)
    run: dict[str, Any] = {
        "status": "timeout" if timed_out else ("stopped" if stopped else "exited"),
        "timed_out": timed_out,
        "exit": None if c.status is None else os.waitstatus_to_exitcode(c.status),
        "seconds": time.monotonic() - start,
        "stderr": _tail(c.paths["err"], tail),
        "stdout": _tail(c.paths["out"], tail),
    }
    if stop_sock is None:
        cap = int(job["limits"].get("max_output_bytes", 8 << 20))
        with open(c.paths["out"], "rb") as f:
            data = f.read(cap + 1)
        run["tail"] = run["stdout"]
        run["stdout"] = data[:cap].decode(errors="replace")
        run["truncated"] = len(data) > cap
    return run


def _tail(path: str, n: int) -> str:
    try:
        if os.stat(path).st_size == 0:
            return ""
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _kill_leftovers(uid: int, pid: int, pidns: bool) -> None:
    """Kill whatever C started that is still alive. When C was pid 1 of its own PID namespace,
    the kernel already killed every process in it as C died; only reaping is left."""
    if pidns:
        pass
    elif uid > 0:
        # A helper with C's uid sends SIGKILL to every process of that uid (and only those).
        helper = os.fork()
        if helper == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                for _ in range(100):
                    os.kill(-1, signal.SIGKILL)
            except BaseException:
                pass
            os._exit(0)
        os.waitpid(helper, 0)
    else:
        # Same uid as us: C's process group, then (we are their subreaper, and the next warm C
        # is not forked yet) every child we have -- daemons that left the group land here.
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        for _ in range(20):
            children = _children_of(os.getpid())
            if not children:
                break
            for child in children:
                with contextlib.suppress(OSError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            time.sleep(0.005)
    while True:  # reap orphans handed to us as subreaper
        try:
            reaped, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if reaped == 0:
            break


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent and fields[0] != "Z":
                found.append(int(entry))
    return found


def _candidate_main(libc: Any, fds: dict[str, int], chan_fd: int, work: str, uid: int) -> None:
    """C: lock the process down, receive the job, run the untrusted program. Never returns."""
    import resource

    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds["out"], 1)
    os.dup2(fds["err"], 2)
    os.dup2(chan_fd, 3)
    os.closerange(4, 1 << 16)  # no pipe to the host, Z or P survives
    os.chdir(work)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work})
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    chan = socket.socket(fileno=3)
    job, stdin_fds = _sock_recv(chan, with_fds=True)
    if job is None:
        os._exit(0)
    # Privileges go only now, so that a warm C waiting for its job holds no process of C's uid
    # (everything of that uid is the current program's, which the clean-up relies on).
    if uid > 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # drops every capability
    if os.geteuid() == 0 and os.getpid() != 1:
        os._exit(71)  # never run a program as root outside its own PID namespace (kill(-1) = the host)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if stdin_fds:
        os.dup2(stdin_fds[0], 0)
        os.close(stdin_fds[0])
    limits, mb = job["limits"], 1 << 20
    cpu = int(job["timeout"]) + 2
    for res, value in ((resource.RLIMIT_AS, int(limits.get("memory_mb", 1024)) * mb),
                       (resource.RLIMIT_CPU, cpu),
                       (resource.RLIMIT_FSIZE, int(limits.get("file_size_mb", 16)) * mb),
                       (resource.RLIMIT_NOFILE, int(limits.get("max_open_files", 64))),
                       (resource.RLIMIT_NPROC, int(limits.get("max_processes", 32))),
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value + 1 if res == resource.RLIMIT_CPU else value))
    sys.settrace(None)
    sys.setprofile(None)
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    if job["mode"] == "stdio":
        chan.close()
        _run_stdio_program(job["program"])
    else:
        _serve_functions(chan, job["program"])


def _flush_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def _run_stdio_program(program: str) -> None:
    code = 0
    try:
        exec(compile(program, "<program>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    _flush_exit(code)


def _serve_functions(chan: socket.socket, program: str) -> None:
    """C's side of the functional protocol. Everything here is untrusted: the program may have
    rewritten any of it. The harness only ever treats what arrives here as data."""
    namespace: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": __builtins__}
    refs: dict[Any, Any] = {"namespace": namespace}
    try:
        exec(compile(program, "<program>", "exec"), namespace)
        hello: dict[str, Any] = {"ready": True}
    except BaseException as exc:
        traceback.print_exc()
        hello = {"load_error": f"{type(exc).__name__}: {exc}"[:2000]}
    _sock_send(chan, hello)
    if "load_error" in hello:
        _flush_exit(1)
    while True:
        try:
            msg = _sock_recv(chan)
        except BaseException:
            msg = None
        if msg is None:
            _flush_exit(0)
        try:
            if msg["op"] == "get":
                if msg["name"] not in namespace:
                    reply: dict[str, Any] = {"missing": True}
                else:
                    reply = {"value": _encode(namespace[msg["name"]], refs, for_candidate=True)}
            else:
                target = msg["target"]
                fn = namespace[target[1]] if target[0] == "n" else refs[int(target[1])]
                args = [_decode(a, refs) for a in msg["args"]]
                kwargs = {k: _decode(v, refs) for k, v in msg["kwargs"].items()}
                reply = {"value": _encode(fn(*args, **kwargs), refs, for_candidate=True)}
        except BaseException as exc:
            reply = {"raised": [type(exc).__name__, str(exc)[:1000]]}
        for stream in (sys.stdout, sys.stderr):  # P keeps only what reached the files
            with contextlib.suppress(BaseException):
                stream.flush()
        try:
            _sock_send(chan, reply)
        except BaseException:
            _flush_exit(1)


# =============================================================================================
# Plain-data encoding. The harness (in Z) decodes with _decode (trusted): the result is built only from
# builtin int/float/complex/str/bytes/bool/None/list/tuple/set/frozenset/dict/range, plus
# _RemoteRef handles that compare equal to nothing but themselves. JSON scalars and arrays
# stand for themselves (JSON round-trips ints and floats exactly); other types are one-key
# objects: {"t": [...]} tuple, {"s"}/{"fs"} sets, {"d": [[k, v], ...]} dict, {"i": hex} huge
# int, {"c": [re, im]}, {"b": hex} bytes, {"rg": [start, stop, step]}, {"ty": name} builtin
# type, {"m": name} stdlib module, {"r": [id, type, callable, truth]} handle, {"rn": name}.
# =============================================================================================
class _RemoteRef:
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


class _RemoteFunction(_RemoteRef):
    """A callable in C: calling it sends the (plain) arguments to C and decodes the result."""

    __slots__ = ("channel", "target")

    def __init__(self, channel: _Channel, target: list[Any], type_name: str = "function") -> None:
        super().__init__(-1 if target[0] == "n" else int(target[1]), type_name, True)
        self.channel = channel
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.channel.call(self.target, args, kwargs)

    def __repr__(self) -> str:
        return f"<function {self.target[1]} in the sandboxed program>"


_BUILTIN_TYPES = {name: obj for name, obj in vars(__import__("builtins")).items() if isinstance(obj, type)}
_BIG = 1 << 62


def _encode(value: Any, refs: dict[Any, Any], for_candidate: bool, depth: int = 0) -> Any:
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
        return [_encode(v, refs, for_candidate, d) for v in value]
    if isinstance(value, _RemoteFunction) and not for_candidate:
        return {"r": [value.target[1]]} if value.target[0] == "r" else {"rn": value.target[1]}
    if isinstance(value, _RemoteRef) and not for_candidate:
        return {"r": [value.ref]}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _encode(int.__index__(value), refs, for_candidate, d)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, complex):
        return {"c": [complex.__complex__(value).real, complex.__complex__(value).imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, tuple):
        return {"t": [_encode(v, refs, for_candidate, d) for v in tuple.__iter__(value)]}
    if isinstance(value, list):
        return [_encode(v, refs, for_candidate, d) for v in list.__iter__(value)]
    if isinstance(value, frozenset):
        return {"fs": [_encode(v, refs, for_candidate, d) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [_encode(v, refs, for_candidate, d) for v in set.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": [[_encode(k, refs, for_candidate, d), _encode(v, refs, for_candidate, d)]
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
        return _encode(tolist(), refs, for_candidate, d)
    try:
        truth: bool | None = bool(value)
    except Exception:
        truth = None
    refs[id(value)] = value
    return {"r": [id(value), type(value).__name__, bool(callable(value)), truth]}


def _decode(x: Any, refs: Any, depth: int = 0) -> Any:
    """JSON-able form -> value. In the harness (``refs`` is the channel) this is the trusted decoder: it
    builds builtin values only. In C (``refs`` a dict) it also resolves handles to objects."""
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if depth > 100:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if t is list:
        return [_decode(v, refs, d) for v in x]
    if t is not dict or len(x) != 1:
        raise ValueError(f"malformed value in the protocol: {t.__name__}")
    ((tag, v),) = x.items()
    if tag == "i":
        if len(v) > 100_000:
            raise ValueError("integer too large")
        return int(v, 16)
    if tag in ("t", "s", "fs"):
        items = [_decode(e, refs, d) for e in v]
        return tuple(items) if tag == "t" else set(items) if tag == "s" else frozenset(items)
    if tag == "d":
        return {_decode(k, refs, d): _decode(e, refs, d) for k, e in v}
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


# =============================================================================================
# Inside the sandbox: the harness (runs in Z: trusted, never runs user code)
# =============================================================================================
class _Deadline(BaseException):
    """The program's wall-clock time is up: abort the remaining tests."""


class _Gone(BaseException):
    """C died or broke the protocol: abort the remaining tests."""


class CandidateError(Exception):
    """The program raised an exception of a non-builtin type (name and message only)."""


_MAPPED_EXCEPTIONS = {
    name: obj for name, obj in vars(__import__("builtins")).items()
    if isinstance(obj, type) and issubclass(obj, Exception) and obj not in (StopIteration, StopAsyncIteration)
}


class _Channel:
    """The harness's end of the socket to C, with the program's deadline on every wait."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.handles: dict[int, _RemoteRef] = {}

    def recv(self) -> Any:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Deadline
        self.sock.settimeout(left)
        try:
            msg = _sock_recv(self.sock)
        except TimeoutError:
            raise _Deadline from None
        except (OSError, ValueError) as exc:
            raise _Gone(f"the program broke the protocol: {exc!r}") from None
        if msg is None:
            raise _Gone("the program's process ended")
        if not isinstance(msg, dict):
            raise _Gone("the program broke the protocol")
        return msg

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
            _sock_send(self.sock, msg)
        except TimeoutError:
            raise _Deadline from None
        except OSError:
            raise _Gone("the program's process ended") from None
        return self.recv()

    def handle(self, ref: int, type_name: str, is_callable: bool, truth: bool | None) -> _RemoteRef:
        if ref not in self.handles:
            self.handles[ref] = (_RemoteFunction(self, ["r", ref], type_name) if is_callable
                                 else _RemoteRef(ref, type_name, truth))
        return self.handles[ref]

    def _value(self, reply: dict[str, Any]) -> Any:
        if "value" in reply:
            try:
                return _decode(reply["value"], self)
            except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
                raise CandidateError(f"the program returned a value that is not plain data: {exc}") from None
        if "raised" in reply:
            name, message = str(reply["raised"][0]), str(reply["raised"][1])
            cls = _MAPPED_EXCEPTIONS.get(name)
            error: Exception | None = None
            if cls is not None:
                with contextlib.suppress(TypeError):
                    error = cls(message)
            if error is not None:
                raise error
            raise CandidateError(f"{name}: {message}")
        raise _Gone("the program broke the protocol")

    def call(self, target: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        payload = {"op": "call", "target": target, "args": [_encode(a, {}, False) for a in args],
                   "kwargs": {str(k): _encode(v, {}, False) for k, v in kwargs.items()}}
        return self._value(self.request(payload))

    def get(self, name: str) -> Any:
        reply = self.request({"op": "get", "name": name})
        if reply.get("missing"):
            raise KeyError(name)
        value = reply.get("value")
        if type(value) is dict and set(value) == {"m"}:
            # `import math` in the program, `math.isclose` in an assert: the harness imports its
            # own copy, only of the standard-library module of that very name.
            if value["m"] != name or name not in sys.stdlib_module_names:
                raise CandidateError(f"the program's {name!r} is module {value['m']!r}; tests may only "
                                     "share a standard-library module under its own name")
            import importlib

            return importlib.import_module(name)
        return self._value(reply)


class _TrustedGlobals(dict):
    """Globals of the test code: trusted definitions first (setup code, the prompt), builtins
    never taken from the program (a program-level ``abs = lambda x: 0`` must not reach the
    tests), anything else (the function under test) fetched from C as a remote function."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self.channel = channel
        self.builtin_names = frozenset(vars(__import__("builtins")))

    def __missing__(self, name: str) -> Any:
        if name in self.builtin_names or name.startswith("__"):
            raise KeyError(name)
        value = self.channel.get(name)
        self[name] = value
        return value


def _check_units(test_code: str) -> tuple[Any, int]:
    """Compile HumanEval-style test code so each top-level statement of ``check`` that holds an
    ``assert`` is one test: it records a pass when it completes, a failure when it raises."""
    import ast

    tree = ast.parse(test_code)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise ValueError("the test code defines no check(candidate) function")
    units = 0
    body = []
    for stmt in checks[-1].body:
        if not any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            body.append(stmt)
            continue
        units += 1
        wrapped = ast.parse(
            "try:\n    pass\nexcept Exception:\n    __rl_record__(False)\nelse:\n    __rl_record__(True)"
        ).body[0]
        wrapped.body = [stmt]  # type: ignore[attr-defined]
        body.append(wrapped)
    checks[-1].body = body or [ast.Pass()]
    ast.fix_missing_locations(tree)
    return compile(tree, "<test>", "exec"), max(units, 1)


_COMPILED: dict[tuple[str, str], Any] = {}


def _compiled(source: str, kind: str) -> Any:
    """Compiled trusted code, cached: in RL the same tests score every sample of a group."""
    key = (kind, source)
    if key not in _COMPILED:
        if len(_COMPILED) > 2048:
            _COMPILED.clear()
        _COMPILED[key] = _check_units(source) if kind == "check" else compile(source, f"<{kind}>", "exec")
    return _COMPILED[key]


def _functions_under_test(asserts: Sequence[str], trusted: Mapping[str, Any]) -> list[str]:
    """Names the assert lines call that the trusted setup does not define and that are not
    builtins (``assert f(x) == 1``, ``assert set(f(x)) == {1}`` -> ``f``); when every called
    name is a builtin, the first one (MBPP has ``def sum(...)`` tested as ``sum(10, 15)``)."""
    import ast
    import builtins

    called: list[str] = []
    for src in asserts:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in called:
                called.append(node.func.id)
    called = [n for n in called if n not in trusted]
    names = [n for n in called if not hasattr(builtins, n)]
    return names or called[:1]


def _harness(sock: socket.socket, job: dict[str, Any], deadline: float) -> dict[str, Any]:
    """The harness (in Z): run the trusted tests against C's functions; return the verdict."""
    channel = _Channel(sock, deadline)
    suite = job["suite"]
    # Compile the tests before anything else: a bad test is the dataset's fault, not the program's.
    try:
        setup = _compiled(job.get("setup") or "", "setup")
        if suite["kind"] == "check":
            test_code, total = _compiled(suite["code"], "check")
            units = None
        else:
            units = [_compiled(src, "assert") for src in suite["asserts"]]
            total = len(units)
    except (SyntaxError, ValueError) as exc:
        return {"harness_error": f"the tests do not compile: {exc}"}
    results: list[bool] = []
    status = "failed"
    detail = ""
    try:
        hello = channel.recv()
        if "load_error" in hello:
            return {"status": "error", "passed": 0, "total": total,
                    "detail": f"the program failed to load: {hello['load_error']}"}
        if not hello.get("ready"):
            raise _Gone("the program broke the protocol")
        ns = _TrustedGlobals(channel)
        ns["__name__"] = "__test__"
        try:
            exec(setup, ns)
        except Exception as exc:
            return {"harness_error": f"the setup code raised {exc!r}"}
        # The functions under test come from the program even when the prompt (run above) defined
        # a stub of the same name, or the name is a builtin (MBPP's `def sum(...)`).
        for name in [suite["entry_point"]] if units is None else _functions_under_test(suite["asserts"], ns):
            ns[name] = _RemoteFunction(channel, ["n", name])
        if units is None:
            ns["__rl_record__"] = results.append
            exec(test_code, ns)
            candidate = ns[suite["entry_point"]]
            try:
                ns["check"](candidate)
            except Exception as exc:  # a statement outside any assert raised
                detail = f"check() raised {type(exc).__name__}: {exc}"[:500]
        else:
            for unit in units:
                try:
                    exec(unit, ns)
                    results.append(True)
                except Exception as exc:
                    results.append(False)
                    detail = detail or f"{type(exc).__name__}: {exc}"[:500]
    except _Deadline:
        status = "timeout"
    except _Gone as exc:
        status, detail = "error", str(exc)
    passed = sum(results)
    if status == "failed" and passed == total and len(results) == total:
        status = "passed"
    return {"status": status, "passed": passed, "total": total, "detail": detail}


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--zygote":
    _zygote_main(json.loads(sys.argv[2]))
