"""Worker processes that run picklable calls with a hard wall-clock limit per call.

Why processes and not ``signal.alarm``: an alarm only fires in the main thread, it
cannot interrupt C code (SymPy's GMP calls, a regex) and it has silently zeroed
rewards in other toolkits. Here the limit is enforced from OUTSIDE: the parent
watches a deadline per call and, when it passes, kills the worker's whole process
group (the worker and anything it started) with SIGKILL, reports ``timeout`` for
that item, and starts a replacement worker. A worker that crashes (segfault,
``os._exit``, out of memory) is reported as ``error`` for its item. Either way the
call returns one outcome per item, in order.

Workers are long-lived (started once, reused across batches) so each item costs a
message round trip, not an interpreter start. The function to run is sent to a
worker once and cached there by a content hash.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

OutcomeStatus = Literal["ok", "timeout", "error"]


@dataclass(frozen=True)
class CallOutcome:
    """Result of one call: ``value`` when ``status == "ok"``, else ``message`` says why."""

    status: OutcomeStatus
    value: Any = None
    message: str = ""
    seconds: float = 0.0


def _worker_main(inbox: Connection, outbox: Connection) -> None:
    """Loop of a worker process: receive functions and calls, send back outcomes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    functions: dict[str, Callable[..., Any]] = {}
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        if kind == "stop":
            return
        if kind == "function":
            _, key, payload = message
            try:
                functions[key] = pickle.loads(payload)
            except Exception:
                functions[key] = _unloadable(traceback.format_exc(limit=3))
            continue
        _, index, key, args, kwargs = message
        start = time.perf_counter()
        try:
            value = functions[key](*args, **kwargs)
            reply = (index, "ok", value, "", time.perf_counter() - start)
            payload = pickle.dumps(reply)
        except BaseException as exc:  # report everything, including SystemExit from user code
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=6))
            payload = pickle.dumps((index, "error", None, text[-4000:], time.perf_counter() - start))
        try:
            outbox.send_bytes(payload)
        except (BrokenPipeError, OSError):
            return


def _unloadable(message: str) -> Callable[..., Any]:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(f"the function could not be unpickled in the worker:\n{message}")

    return fail


WORKER_BOOT = ("import sys; sys.path[:] = sys.argv[3:]; del sys.argv[3:]; import rewards._worker as w; "
               "w.main(int(sys.argv[1]), int(sys.argv[2]))")
"""What a worker interpreter runs (``python -c``): the parent's ``sys.path``, exactly, before anything of the
project is imported, then the worker loop. ``python -m rewards._worker`` would put the working directory first on
``sys.path``, so a user's ``rewards.py`` or ``reasoning_rl.py`` there (or a clone's ``rewards/`` folder) would
shadow the package the parent runs; with the parent's path the worker imports the same files as the parent."""


class _Worker:
    """One worker: a fresh interpreter (:data:`WORKER_BOOT`) in its own session.

    A plain subprocess rather than ``multiprocessing.Process``: spawn/forkserver would
    re-import the user's ``__main__`` script in every worker (re-running an unguarded
    training script), and fork would copy a parent holding torch threads and models.
    Messages travel over two private pipes, so a verifier that prints cannot corrupt them.
    """

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER_BOOT, str(to_child_r), str(from_child_w), *sys.path],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: killing it kills what the verifier started
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.conn = Connection(from_child_r, writable=False)
        self.known_functions: set[str] = set()
        self.index: int | None = None
        self.deadline = 0.0
        self.started_at = 0.0

    def send(self, message: tuple[Any, ...]) -> None:
        self.outbox.send(message)

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        for kill in (lambda: os.killpg(self.process.pid, signal.SIGKILL), self.process.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._close_pipes()

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.outbox.send(("stop",))
        try:
            self.process.wait(timeout=1)
            self._close_pipes()
        except subprocess.TimeoutExpired:
            self.kill()

    def _close_pipes(self) -> None:
        for c in (self.outbox, self.conn):
            with contextlib.suppress(OSError):
                c.close()


class WorkerPool:
    """A pool of worker processes running calls with a hard per-call time limit.

    ``num_workers=0`` runs calls in the calling process with NO time limit (for
    debugging with breakpoints); every other setting enforces the limit.
    """

    def __init__(self, num_workers: int | None = None) -> None:
        if num_workers is None:
            num_workers = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        self.num_workers = num_workers
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        # Kill the workers at interpreter exit or garbage collection even if close() is never called.
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)

    # -- public API -------------------------------------------------------------------------------
    def map(
        self,
        fn: Callable[..., Any],
        items: Sequence[tuple[Any, ...]],
        timeout: float,
        kwargs: Sequence[dict[str, Any]] | None = None,
    ) -> list[CallOutcome]:
        """Run ``fn(*items[i], **kwargs[i])`` for every ``i``; one outcome per item, in order.

        ``timeout`` is the wall-clock limit of each call, in seconds, counted from the
        moment a worker starts it.
        """
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if kwargs is not None and len(kwargs) != len(items):
            raise ValueError(f"got {len(items)} items but {len(kwargs)} kwargs")
        if not items:
            return []
        if self._closed:
            raise RuntimeError("this WorkerPool was closed")
        kw = list(kwargs) if kwargs is not None else [{}] * len(items)
        if self.num_workers == 0:
            return [_call_inline(fn, args, k) for args, k in zip(items, kw)]
        payload = pickle.dumps(fn)
        key = hashlib.blake2b(payload, digest_size=16).hexdigest()
        with self._lock:
            return self._run(key, payload, list(items), kw, timeout)

    def close(self) -> None:
        with self._lock:
            for worker in self._workers:
                worker.stop()
            self._workers.clear()
            self._closed = True

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- scheduling -------------------------------------------------------------------------------
    def _run(
        self, key: str, payload: bytes, items: list[tuple[Any, ...]], kw: list[dict[str, Any]], timeout: float
    ) -> list[CallOutcome]:
        while len(self._workers) < min(self.num_workers, len(items)):
            self._workers.append(_Worker())
        outcomes: list[CallOutcome | None] = [None] * len(items)
        pending = deque(range(len(items)))
        idle = deque(self._workers)
        busy: dict[Connection, _Worker] = {}

        def dispatch(worker: _Worker) -> None:
            index = pending.popleft()
            try:
                if key not in worker.known_functions:
                    worker.send(("function", key, payload))
                    worker.known_functions.add(key)
                worker.send(("call", index, key, items[index], kw[index]))
            except (BrokenPipeError, OSError):
                # The worker died between batches; replace it and retry this item.
                pending.appendleft(index)
                idle.append(self._replace(worker))
                return
            worker.index = index
            worker.started_at = time.monotonic()
            worker.deadline = worker.started_at + timeout
            busy[worker.conn] = worker

        while pending or busy:
            while pending and idle:
                dispatch(idle.popleft())
            if not busy:
                continue
            now = time.monotonic()
            wait_for = max(0.0, min(w.deadline for w in busy.values()) - now)
            # A dead worker's pipe reads as EOF, so waiting on the pipes also sees crashes.
            ready = wait(list(busy.keys()), timeout=wait_for)
            for obj in ready:
                worker = busy[obj]
                reply = _try_receive(worker.conn)
                del busy[worker.conn]
                index = worker.index
                assert index is not None
                if reply is not None:
                    _, status, value, message, seconds = reply
                    outcomes[index] = CallOutcome(status, value, message, seconds)
                    idle.append(worker)
                else:
                    code = _wait_exit(worker)
                    outcomes[index] = CallOutcome(
                        "error",
                        message=f"the worker process died while running this item (exit code {code})",
                        seconds=time.monotonic() - worker.started_at,
                    )
                    idle.append(self._replace(worker))
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if now >= worker.deadline:
                    del busy[conn]
                    assert worker.index is not None
                    outcomes[worker.index] = CallOutcome(
                        "timeout", message=f"killed after {timeout:g}s", seconds=now - worker.started_at
                    )
                    idle.append(self._replace(worker))
        return [o if o is not None else CallOutcome("error", message="lost") for o in outcomes]

    def _replace(self, worker: _Worker) -> _Worker:
        worker.kill()
        fresh = _Worker()
        self._workers[self._workers.index(worker)] = fresh
        return fresh


def _kill_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.kill()


def _wait_exit(worker: _Worker) -> int | None:
    try:
        return worker.process.wait(timeout=1)
    except subprocess.TimeoutExpired:
        return None


def _try_receive(conn: Connection) -> tuple[Any, ...] | None:
    try:
        if not conn.poll():
            return None
        return pickle.loads(conn.recv_bytes())
    except (EOFError, OSError, pickle.UnpicklingError):
        return None


def _call_inline(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallOutcome:
    start = time.perf_counter()
    try:
        return CallOutcome("ok", fn(*args, **kwargs), seconds=time.perf_counter() - start)
    except Exception as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=6))
        return CallOutcome("error", message=text[-4000:], seconds=time.perf_counter() - start)


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool (one worker per available core), started on first use."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool._closed:
            _default_pool = WorkerPool()
            atexit.register(_default_pool.close)
        return _default_pool


def run_with_timeout(fn: Callable[..., Any], *args: Any, timeout: float, pool: WorkerPool | None = None,
                     **kwargs: Any) -> CallOutcome:
    """Run one call in a worker with a hard wall-clock limit."""
    return (pool or default_pool()).map(fn, [args], timeout, [kwargs])[0]

