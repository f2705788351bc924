"""Host side: start zygotes in their jail, send them jobs, turn replies into typed results.

:class:`Sandbox` is one zygote (started once, reused; each program still gets a fresh process
inside it); :class:`SandboxPool` runs many jobs over several sandboxes in parallel. Neither ever
runs the program: they only exchange messages with the jail (:mod:`.inside.wire`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .inside.clock import wall_seconds
from .inside.tamper import KINDS
from .inside.wire import read_frame, write_frame
from .jail import IsolationLevel, clean_env, detect_isolation, python_roots, site_dirs, zygote_command
from .results import ExecutionResult, SandboxError


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
        config = json.dumps({"level": self.level, "uid": uid, "python_roots": python_roots(),
                             "site_dirs": site_dirs()})
        cmd = zygote_command(self.level, config)
        self._errlog = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the zygote
        self._proc = _launcher.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog,
                                     env=clean_env(), start_new_session=True, close_fds=True)
        self._owner_pid = os.getpid()
        try:
            hello = read_frame(self._proc.stdout.fileno(), time.monotonic() + 30)  # type: ignore[union-attr]
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
                write_frame(self._proc.stdin.fileno(), dict(job))
                reply = read_frame(self._proc.stdout.fileno(), time.monotonic() + budget)
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
        tamper=tuple(k for k in reply.get("tamper", ()) if k in KINDS),
    )


def _budget(job: Mapping[str, Any]) -> float:
    limits = job.get("limits", {})
    if job["mode"] == "stdio":
        return wall_seconds(float(job["case_timeout"]), limits) * max(1, len(job["cases"])) + 10.0
    return wall_seconds(float(job["timeout"]), limits) + 10.0


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
