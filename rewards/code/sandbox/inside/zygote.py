"""The zygote Z: the jail's main process, started once per host worker and reused.

It forks the program server P before reading any test, then serves the host's jobs one at a
time: a functional job is tested by the harness (in this process, which never runs the
program) against C's functions; a stdin/stdout job's outputs are compared here.
Started by the host as ``python -I -S -B -c BOOT ROOT CONFIG`` (``-S`` at bwrap and unshare) (:func:`main`), where ROOT is the
folder that holds this package (``/sandbox`` at ``bwrap``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
import traceback
from typing import Any

from .clock import wall_seconds
from .harness import harness
from .namespaces import PR_SET_DUMPABLE, load_libc, pidns_works, private_mounts
from .server import program_server
from .tamper import pass_marker
from .wire import read_frame, sock_recv, sock_send, write_frame

_PREIMPORT = ("math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string", "typing",
              "fractions", "decimal", "operator", "copy", "datetime", "array", "numbers", "enum", "abc", "io",
              "cmath", "textwrap", "resource", "glob", "fnmatch", "pprint")
"""Imported before P is forked, so that a program importing them finds them loaded. Not here: what
imports ``random`` or ``threading`` (``random``, ``statistics``, ``tempfile``, ``queue``: C, forked
without at-fork handlers, would have to reseed ``random`` itself), and large rarely used modules
(``hashlib`` maps OpenSSL, ``dataclasses``, ``ast``): every module makes each fork and exit dearer
(forking a Python with all of them, ``hashlib`` included, cost ~0.25 ms more CPU than without)."""
_PREIMPORT_RLIMITS = (*_PREIMPORT, "random", "statistics", "hashlib", "dataclasses", "ast", "queue", "threading",
                      "tempfile")
"""At ``rlimits`` (no mount namespace) a C of another uid cannot read a Python installed under a private
home (``/root/.pyenv``): it imports only what the zygote loaded, so the list is broad there (and
``site`` runs, as before)."""


def main() -> None:
    """Entry point of ``python -I -S -B -c BOOT ROOT CONFIG`` (``-S`` at bwrap and unshare) (see ``jail.BOOT``)."""
    config = json.loads(sys.argv[2])
    # -S: no `site`, so no .pth file runs code in the jail (they imported ~80 modules here, threading
    # and random among them); the site-packages folders themselves stay importable for programs.
    sys.path.extend(p for p in config.get("site_dirs", ()) if p not in sys.path)
    serve(config)


def serve(config: dict[str, Any]) -> None:
    """Z: set up the jail from inside, fork P, then answer the host's jobs until end of input."""
    # The protocol pipes move to high fds; fd 0 becomes /dev/null and fd 1 stderr, so a stray
    # print in our own code cannot corrupt the protocol.
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    for name in _PREIMPORT if config["level"] in ("bwrap", "unshare") else _PREIMPORT_RLIMITS:
        with contextlib.suppress(ImportError):
            __import__(name)
    libc = load_libc()
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no /proc/<pid>/mem, fd or ptrace access from C
    level = config["level"]
    if level == "unshare":
        private_mounts(config["python_roots"])
    if level in ("bwrap", "unshare"):
        with contextlib.suppress(OSError):
            os.chmod("/tmp", 0o755)  # C may write its own directory only
    base = _private_dir("/tmp")
    uid = int(config["uid"])
    can_drop = uid > 0 and os.geteuid() == 0
    pidns = level in ("bwrap", "unshare") and pidns_works(libc)
    z_sock, p_sock = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # P: forked before any test was read, so C (forked from P) never holds one
        z_sock.close()
        os.close(rfd)
        os.close(wfd)
        try:
            program_server(p_sock, base, uid if can_drop else -1, pidns)
        except BaseException:
            traceback.print_exc()  # into the sandbox's stderr log, which the host reports
        finally:
            os._exit(0)
    p_sock.close()
    write_frame(wfd, {"hello": "zygote", "level": level, "uid": uid if can_drop else None, "pid_namespace": pidns,
                       "python": sys.version.split()[0]})
    try:
        while True:
            job = read_frame(rfd)
            if job is None:
                break
            try:
                reply = _handle_job(job, z_sock)
            except Exception:
                reply = {"status": "error", "harness_error": "zygote: " + traceback.format_exc(limit=4)}
            write_frame(wfd, reply)
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break  # P died: exit, and the host starts a fresh sandbox for the next program
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)


def _private_dir(parent: str) -> str:
    """A new directory of ours under ``parent`` (mode 0711: C may traverse it to its own folder),
    as tempfile.mkdtemp would make it -- which would import ``random`` into P."""
    while True:
        path = os.path.join(parent, f"rl-sandbox-{os.getpid()}-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        os.chmod(path, 0o711)
        return path


def _handle_job(job: dict[str, Any], z_sock: socket.socket, prefetch: bool = True) -> dict[str, Any]:
    start = time.monotonic()
    limits = job.get("limits", {})
    # P announced the next warm C before we asked: its channel is (or soon will be) waiting here.
    announced, fds = sock_recv(z_sock, with_fds=True)
    if not announced or not announced.get("channel") or not fds:
        for fd in fds:
            os.close(fd)
        raise RuntimeError("the program server did not announce a candidate process")
    w_end = socket.socket(fileno=fds[0])
    if job["mode"] == "stdio":
        w_end.close()  # P sends each case's job itself, with its input
        cases = job["cases"]
        sock_send(z_sock, {"op": "stdio", "program": job["program"], "limits": limits,
                            "timeout": job["case_timeout"], "inputs": [c["input"] for c in cases]})
        report = sock_recv(z_sock) or {}
        return _judge_stdio(job, report, time.monotonic() - start)

    # functional: the job goes to C straight from here; P only watches C. The harness (this
    # process, which never runs user code) then tests C's functions through the same channel.
    try:
        sock_send(w_end, {"mode": "functional", "program": job["program"], "limits": limits,
                          "timeout": job["timeout"]})
        sent = True
    except OSError:  # the warm C died before its job: not the program's doing
        sent = False
    try:
        if sent:
            verdict = harness(w_end, job, start + wall_seconds(float(job["timeout"]), limits), prefetch)
        else:
            verdict = {"harness_error": "the candidate process ended before it received its program"}
    except Exception:
        verdict = {"harness_error": "harness: " + traceback.format_exc(limit=6)}
    finally:
        w_end.close()
    sock_send(z_sock, {"op": "stop", "ended": bool(verdict.get("ended_early")), "timeout": job["timeout"],
                       "limits": limits})
    report = sock_recv(z_sock) or {}
    if verdict.get("rerun"):  # the test did not make the calls planned from its source: again, fresh
        return _handle_job(job, z_sock, prefetch=False)
    verdict.setdefault("passed", 0)
    verdict.setdefault("total", 0)
    tamper = set(verdict.pop("tamper", ()))
    exit_code = report.get("exit")
    if (verdict.pop("ended_early", False) and report.get("status") == "exited" and exit_code is not None
            and exit_code >= 0):
        tamper.add("early_exit")  # the process ended by its own choice while the harness still waited
    if pass_marker(report.get("stdout", "")):
        tamper.add("pass_marker")
    verdict["tamper"] = sorted(tamper)
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
                      "seconds": run.get("seconds", 0.0), "cpu_seconds": run.get("cpu_seconds", 0.0)})
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
