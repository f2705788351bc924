"""The candidate C: the ONLY code in reasoning-rl that executes a model-written program.

C is forked "warm" by the program server (:mod:`.server`) before its program is known; here it
locks itself down (closed descriptors, fresh uid, no new privileges, rlimits), receives its job
and runs the program: a stdin/stdout program as ``__main__``, or a functional program whose
functions the harness then calls over C's channel. Everything C sends back is untrusted data,
decoded by the harness with trusted code.

What is the same for every C is prepared ONCE in P by :func:`prepare` and inherited through
fork: the environment, the working directory, signal dispositions, the standard streams and
the tamper :class:`~.tamper.Watch`. Each step done in C instead costs every program its Python
work plus the copy-on-write faults of the pages it touches (measured: ~1.2 ms per program).
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import socket
import sys
import traceback
from typing import Any, NamedTuple

from .clock import cpu_seconds
from .namespaces import PR_SET_NO_NEW_PRIVS
from .tamper import Watch
from .values import decode, encode
from .wire import sock_recv, sock_send


class Prepared(NamedTuple):
    """What P builds once for every C it will fork (:func:`prepare`)."""

    stdin: io.TextIOWrapper
    """On fd 0: /dev/null (P's, inherited from the zygote), or the case's input (stdin/stdout tests)."""
    stdout_lines: io.TextIOWrapper
    """On fd 1, line-buffered (functional tests: what the program printed reaches the file even when
    its process is killed before a flush, and Z looks there for pass markers)."""
    stdout_block: io.TextIOWrapper
    """On fd 1, block-buffered (stdin/stdout tests: the output is the answer, often large)."""
    stderr: io.TextIOWrapper
    """On fd 2."""
    watch: Watch
    """The tamper watch (allowed roots and the ``builtins`` snapshot computed once)."""


def prepare(work: str) -> Prepared:
    """Run ONCE in P: the process state every C inherits. ``work`` is the (fixed) path of C's
    private directory, which P recreates empty before each fork and makes its working directory:
    it is C's ``$HOME`` and ``$TMPDIR`` and ``tempfile``'s directory (if the zygote imported it,
    its cached directory would be the jail's read-only /tmp)."""
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work})
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:
        tempfile.tempdir = work
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)  # P too: it has no handler of its own to keep
    return Prepared(
        stdin=open(0, encoding="utf-8", errors="replace", closefd=False),
        stdout_lines=open(1, "w", buffering=1, encoding="utf-8", closefd=False),  # line-buffered
        stdout_block=open(1, "w", encoding="utf-8", closefd=False),
        stderr=open(2, "w", encoding="utf-8", closefd=False),
        watch=Watch(work),
    )


def candidate_main(libc: Any, out_fd: int, err_fd: int, chan_fd: int, uid: int, ready: Prepared) -> None:
    """C: lock the process down, receive the job, run the untrusted program. Never returns.

    Forked by P with :func:`~.namespaces.raw_fork` (no at-fork handlers ran), in P's working
    directory (C's own, empty) and environment (:func:`prepare`); fd 0 is P's /dev/null.
    """
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.dup2(chan_fd, 3)
    os.closerange(4, 1 << 16)  # no pipe to the host, Z or P survives
    chan = socket.socket(fileno=3)
    job, stdin_fds = sock_recv(chan, with_fds=True)
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
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if stdin_fds:
        os.dup2(stdin_fds[0], 0)
        os.close(stdin_fds[0])
    limits, mb = job["limits"], 1 << 20
    cpu = cpu_seconds(float(job["timeout"]))  # the time limit a busy program hits (clock.py)
    for res, value in ((resource.RLIMIT_AS, int(limits.get("memory_mb", 1024)) * mb),
                       (resource.RLIMIT_CPU, cpu),
                       (resource.RLIMIT_FSIZE, int(limits.get("file_size_mb", 16)) * mb),
                       (resource.RLIMIT_NOFILE, int(limits.get("max_open_files", 64))),
                       (resource.RLIMIT_NPROC, int(limits.get("max_processes", 32))),
                       (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(res, (value, value))  # RLIMIT_CPU: SIGKILL at the limit (pid 1 ignores SIGXCPU)
    sys.settrace(None)
    sys.setprofile(None)
    rng = sys.modules.get("random")
    if rng is not None:  # what os.fork's at-fork handler would have done: programs do not share a seed
        rng.seed()
    sys.stdin, sys.stderr = ready.stdin, ready.stderr
    if job["mode"] == "stdio":
        chan.close()
        sys.stdout = ready.stdout_block
        _run_stdio_program(job["program"])
    else:
        sys.stdout = ready.stdout_lines
        _serve_functions(chan, job["program"], ready.watch)


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


def _serve_functions(chan: socket.socket, program: str, watch: Watch) -> None:
    """C's side of the functional protocol. Everything here is untrusted: the program may have
    rewritten any of it. The harness only ever treats what arrives here as data (the tamper
    kinds in each message included: see :mod:`.tamper`)."""
    namespace: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": __builtins__}
    refs: dict[Any, Any] = {"namespace": namespace}
    watch.install()
    try:
        exec(compile(program, "<program>", "exec"), namespace)
        hello: dict[str, Any] = {"ready": True}
    except BaseException as exc:
        traceback.print_exc()
        if isinstance(exc, SystemExit):
            watch.seen.add("early_exit")
        hello = {"load_error": f"{type(exc).__name__}: {exc}"[:2000]}
    # Inline, not in a function: a trace hook the program left would run (and rewrite) C's own code.
    if sys.gettrace() is not None or sys.getprofile() is not None:
        sys.settrace(None)
        sys.setprofile(None)
        watch.seen.add("trace_hook")
    hello["tamper"] = watch.check()
    for stream in (sys.stdout, sys.stderr):  # what it printed while loading reaches the files
        with contextlib.suppress(BaseException):
            stream.flush()
    sock_send(chan, hello)
    if "load_error" in hello:
        _flush_exit(1)
    queue: list[Any] = []  # the rest of a batch: calls the harness sent ahead (prefetch.py), one reply each
    while True:
        if not queue:
            try:
                received = sock_recv(chan)
            except BaseException:
                received = None
            if received is None:
                _flush_exit(0)
            batch = received.get("calls") if type(received) is dict and received.get("op") == "batch" else None
            queue = list(batch) if type(batch) is list else [received]
        msg = queue.pop(0)
        try:
            if msg["op"] == "get":
                if msg["name"] not in namespace:
                    reply: dict[str, Any] = {"missing": True}
                else:
                    reply = {"value": encode(namespace[msg["name"]], refs, for_candidate=True)}
            else:
                target = msg["target"]
                fn = namespace[target[1]] if target[0] == "n" else refs[int(target[1])]
                args = [decode(a, refs) for a in msg["args"]]
                kwargs = {k: decode(v, refs) for k, v in msg["kwargs"].items()}
                reply = {"value": encode(fn(*args, **kwargs), refs, for_candidate=True)}
        except BaseException as exc:
            if isinstance(exc, SystemExit):
                watch.seen.add("early_exit")
            reply = {"raised": [type(exc).__name__, str(exc)[:1000]]}
        if sys.gettrace() is not None or sys.getprofile() is not None:
            sys.settrace(None)
            sys.setprofile(None)
            watch.seen.add("trace_hook")
        reply["tamper"] = watch.check()
        for stream in (sys.stdout, sys.stderr):  # P keeps only what reached the files
            with contextlib.suppress(BaseException):
                stream.flush()
        try:
            sock_send(chan, reply)
        except BaseException:
            _flush_exit(1)
