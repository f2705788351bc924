"""The program server P: forked from the zygote before any test was read; hands each program to
a warm candidate C, watches it (exit, stop from the harness, deadline), reports, cleans up.
P never sees a test, so neither does C.

One cycle per program, kept short because everything P touches after a fork is a copy-on-write
fault: fork the next warm C (its stdout/stderr are fresh memfds, its directory the fixed
``<base>/w`` recreated empty), announce its channel to Z, and wait for Z's ``stop``; report and
clean up. A functional program's job and every test call travel between Z and C directly, never
through P. What every C shares (environment, streams, the tamper watch) was prepared once
(:func:`~.candidate.prepare`).
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

from .candidate import Prepared, candidate_main, prepare
from .clock import cpu_seconds, wall_seconds
from .namespaces import CLONE_NEWPID, PR_SET_CHILD_SUBREAPER, load_libc, raw_fork
from .wire import sock_recv, sock_send


class _Server:
    """P's state that outlives one program: the fixed directory of C, the PID namespace handle."""

    def __init__(self, base: str, uid: int, pidns: bool) -> None:
        self.libc = load_libc()
        self.uid = uid
        self.pidns = pidns
        self.ns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY) if pidns else -1
        self.work = os.path.join(base, "w")
        self.stale = os.path.join(base, "stale")  # directories a program left undeletable
        os.mkdir(self.stale, 0o700)
        self.stale_count = 0
        self.ready: Prepared = prepare(self.work)

    def new_workdir(self) -> None:
        os.mkdir(self.work, 0o700)
        if self.uid > 0:
            os.chown(self.work, self.uid, self.uid)
        os.chdir(self.work)  # C inherits it as its working directory

    def clear_workdir(self) -> None:
        try:
            os.rmdir(self.work)  # empty: most programs write no file
        except FileNotFoundError:
            pass
        except OSError:
            shutil.rmtree(self.work, ignore_errors=True)
            if os.path.lexists(self.work):  # out of the way (mode 0700, ours), never reused
                self.stale_count += 1
                os.rename(self.work, os.path.join(self.stale, str(self.stale_count)))


class _Warm:
    """A candidate process C forked and locked down BEFORE its program is known.

    Forking takes milliseconds; doing it while the previous program's verdict travels back keeps
    it off the critical path. C waits on its channel for the job.
    """

    def __init__(self, server: _Server) -> None:
        server.new_workdir()
        self.out = os.memfd_create("stdout", 0)  # capped by C's RLIMIT_FSIZE like any file
        self.err = os.memfd_create("stderr", 0)
        self.p_end, c_end = socket.socketpair()
        if server.ns_fd >= 0:  # the next child is pid 1 of a brand-new PID namespace
            server.libc.setns(server.ns_fd, CLONE_NEWPID)
            server.libc.unshare(CLONE_NEWPID)
        self.pid = raw_fork()  # P has one thread: no at-fork handlers to run (namespaces.raw_fork)
        if self.pid == 0:
            try:
                self.p_end.close()
                candidate_main(server.libc, self.out, self.err, c_end.fileno(), server.uid, server.ready)
            finally:
                os._exit(70)
        c_end.close()
        self.pidfd = os.pidfd_open(self.pid)
        self.status: int | None = None

    def reap(self, server: _Server) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # pid 1 of its namespace: the kernel kills the rest
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)
        self.p_end.close()
        for fd in (self.pidfd, self.out, self.err):
            os.close(fd)
        _kill_leftovers(server.uid, self.pid, server.pidns)
        server.clear_workdir()


def program_server(sock: socket.socket, base: str, uid: int, pidns: bool) -> None:
    """P: hands each program to a warm C, watches it, reports, cleans up. Never sees a test.

    Protocol with Z (``sock``): P announces each warm C with ``{"channel": true}`` and C's end of
    the channel as a file descriptor, before Z asks. Functional job: Z sends the job to C over
    that channel, runs the tests, and sends P ``{"op": "stop", "ended", "timeout", "limits"}``; P
    replies with the run (exit, stdout/stderr tails, timeout). The time limits of a functional
    program are the harness's (its deadline) and C's own (RLIMIT_CPU); the host kills the whole
    sandbox if Z does not answer. Stdin/stdout job: ``{"op": "stdio", ...}`` with the inputs; P
    runs each case in a fresh C itself, each under its deadline, and replies ``{"cases": [...]}``.
    """
    import gc

    server = _Server(base, uid, pidns)
    server.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of C come back to us, not to init
    gc.collect()
    gc.freeze()  # C's garbage collector will not touch (and copy) our pages
    warm = _announce(sock, _Warm(server))
    while True:
        msg = sock_recv(sock)
        if msg is None:
            warm.reap(server)
            return
        limits = msg["limits"]
        tail = int(limits.get("output_tail_bytes", 2000))
        if msg["op"] == "stop":  # functional: Z has its verdict (or saw C's process end)
            sock_send(sock, _stopped(warm, float(msg["timeout"]), bool(msg.get("ended")), tail))
            warm.reap(server)  # report first, clean up after: off the critical path
        else:
            job = {"mode": "stdio", "program": msg["program"], "limits": limits, "timeout": float(msg["timeout"])}
            cases = []
            for i, data in enumerate(msg["inputs"]):
                c = warm if i == 0 else _Warm(server)
                stdin_fd = os.memfd_create("stdin", 0)
                os.write(stdin_fd, data.encode())
                os.lseek(stdin_fd, 0, os.SEEK_SET)
                sock_send(c.p_end, job, [stdin_fd])
                os.close(stdin_fd)
                c.p_end.close()
                cases.append(_watch(c, job["timeout"], limits, tail))
                c.reap(server)
            if not msg["inputs"]:
                warm.reap(server)
            sock_send(sock, {"cases": cases})
        warm = _announce(sock, _Warm(server))


def _announce(sock: socket.socket, warm: _Warm) -> _Warm:
    """Hand Z the warm C's channel now, so that the next job does not wait for it."""
    sock_send(sock, {"channel": True}, [warm.p_end.fileno()])
    return warm


def _stopped(c: _Warm, timeout: float, ended: bool, tail: int) -> dict[str, Any]:
    """A functional program's run once Z has stopped it: ``ended`` -- the harness saw C's process
    end: its exit status (a CPU-limit kill is a timeout); otherwise C is killed, nothing it does
    from now on matters."""
    timed_out = False
    if ended:
        _, c.status, usage = os.wait4(c.pid, 0)
        code = os.waitstatus_to_exitcode(c.status)
        timed_out = (code in (-signal.SIGXCPU, -signal.SIGKILL)
                     and usage.ru_utime + usage.ru_stime >= 0.8 * cpu_seconds(timeout))
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(c.pid, signal.SIGKILL)
    return {"status": "timeout" if timed_out else ("exited" if ended else "stopped"), "timed_out": timed_out,
            "exit": None if c.status is None else os.waitstatus_to_exitcode(c.status),
            "stderr": _tail(c.err, tail), "stdout": _tail(c.out, tail)}


def _watch(c: _Warm, timeout: float, limits: dict[str, Any], tail: int) -> dict[str, Any]:
    """A stdin/stdout case: wait for C to exit or for the deadline (then SIGKILL); its exit status
    and whole stdout are part of the verdict."""
    start = time.monotonic()
    deadline = start + wall_seconds(timeout, limits) + 0.25
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        if select.select([c.pidfd], [], [], left)[0]:
            break
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.kill(c.pid, signal.SIGKILL)
    _, c.status, usage = os.wait4(c.pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    # Killed by its CPU-time limit (SIGKILL: soft = hard limit) is a timeout. rusage reads a few
    # percent below the limit the kernel enforced (0.96 s measured for a 1 s limit).
    code = os.waitstatus_to_exitcode(c.status)
    timed_out = timed_out or (code in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= 0.8 * cpu_seconds(timeout))
    cap = int(limits.get("max_output_bytes", 8 << 20))
    data = _read(c.out, 0, cap + 1)
    return {"status": "timeout" if timed_out else "exited", "timed_out": timed_out, "exit": code,
            "seconds": time.monotonic() - start, "cpu_seconds": round(cpu, 4), "stderr": _tail(c.err, tail),
            "tail": _tail(c.out, tail), "stdout": data[:cap].decode(errors="replace"), "truncated": len(data) > cap}


def _read(fd: int, offset: int, n: int) -> bytes:
    """Up to ``n`` bytes of the memfd ``fd`` from ``offset`` (C may have written them from any offset)."""
    chunks, size = [], 0
    while size < n:
        chunk = os.pread(fd, n - size, offset + size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _tail(fd: int, n: int) -> str:
    try:
        size = os.fstat(fd).st_size
        return _read(fd, max(0, size - n), n).decode(errors="replace") if size else ""
    except OSError:
        return ""


def _kill_leftovers(uid: int, pid: int, pidns: bool) -> None:
    """Kill whatever C started that is still alive. When C was pid 1 of its own PID namespace,
    the kernel already killed every process in it as C died; only reaping is left."""
    if pidns:
        pass
    elif uid > 0:
        # A helper with C's uid sends SIGKILL to every process of that uid (and only those).
        helper = raw_fork()
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
