"""The program server P: forked from the zygote before any test was read; hands each program to
a warm candidate C, watches it (exit, stop from the harness, deadline), reports, cleans up.
P never sees a test, so neither does C.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import time
from typing import Any

from .candidate import candidate_main
from .clock import cpu_seconds, wall_seconds
from .namespaces import CLONE_NEWPID, PR_SET_CHILD_SUBREAPER, load_libc
from .wire import sock_recv, sock_send


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
            libc.setns(ns_fd, CLONE_NEWPID)
            libc.unshare(CLONE_NEWPID)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.p_end.close()
                candidate_main(libc, fds, c_end.fileno(), work, uid)
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


def program_server(sock: socket.socket, base: str, uid: int, pidns: bool) -> None:
    """P: hands each program to a warm C, watches it, reports, cleans up. Never sees a test."""
    import gc

    libc = load_libc()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of C come back to us, not to init
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
        msg, fds = sock_recv(sock, with_fds=True)
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
                sock_send(c.p_end, {**job, "mode": "functional"})
            except OSError:  # the warm C died before its job: no channel, a fresh C next time
                sock_send(sock, {"channel": False})
                c.reap(uid, pidns)
                warm = fresh()
                continue
            sock_send(sock, {"channel": True}, [c.p_end.fileno()])  # the harness talks to C directly
            c.p_end.close()
            run = _watch(c, job, stop_sock=sock, tail=int(job["limits"].get("output_tail_bytes", 2000)))
            sock_send(sock, run)  # report first, clean up after: off the critical path
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
                sock_send(c.p_end, {**job, "mode": "stdio"}, [stdin_fd])
                os.close(stdin_fd)
                c.p_end.close()
                cases.append(_watch(c, job, stop_sock=None, tail=int(job["limits"].get("output_tail_bytes", 2000))))
                c.reap(uid, pidns)
                warm = fresh()
            sock_send(sock, {"cases": cases})


def _watch(c: _Warm, job: dict[str, Any], stop_sock: socket.socket | None, tail: int) -> dict[str, Any]:
    """Wait for C to exit, for a stop from Z, or for the deadline; C is SIGKILLed unless it exited."""
    start = time.monotonic()
    functional = stop_sock is not None
    # The harness's own deadline (the same wall-clock backstop) fires first and reports the timeout.
    deadline = start + wall_seconds(job["timeout"], job["limits"]) + 0.25
    cpu = 0.0
    timed_out = stopped = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        watch = [c.pidfd] + ([stop_sock] if stop_sock is not None else [])
        ready = select.select(watch, [], [], left)[0]
        if c.pidfd in ready:
            _, c.status, usage = os.wait4(c.pid, 0)
            cpu = usage.ru_utime + usage.ru_stime
            # Killed by its CPU-time limit (SIGKILL: soft = hard limit) is a timeout. rusage reads a
            # few percent below the limit the kernel enforced (0.96 s measured for a 1 s limit).
            code = os.waitstatus_to_exitcode(c.status)
            timed_out = code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= 0.8 * cpu_seconds(job["timeout"])
            break
        if stop_sock is not None and stop_sock in ready:
            msg = sock_recv(stop_sock)
            assert msg is not None and msg["op"] == "stop", msg
            stop_sock = None
            if msg.get("ended"):  # the harness saw C's process end: wait for its exit status
                continue
            stopped = True  # the harness has its verdict; nothing C does from now on matters
            break
    if c.status is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(c.pid, signal.SIGKILL)
    if not functional and c.status is None:  # stdio: the exit status is part of the verdict
        _, c.status, usage = os.wait4(c.pid, 0)
        cpu = usage.ru_utime + usage.ru_stime
    run: dict[str, Any] = {
        "status": "timeout" if timed_out else ("stopped" if stopped else "exited"),
        "timed_out": timed_out,
        "exit": None if c.status is None else os.waitstatus_to_exitcode(c.status),
        "seconds": time.monotonic() - start,
        "cpu_seconds": round(cpu, 4),
        "stderr": _tail(c.paths["err"], tail),
        "stdout": _tail(c.paths["out"], tail),
    }
    if not functional:
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
