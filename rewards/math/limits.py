"""A hard time limit for SymPy, enforced from outside by killing a worker process.

SymPy can run for minutes (or forever) on adversarial input, and ``signal.alarm``
is not an option (main thread only; it cannot interrupt C code). So every SymPy
comparison runs in a :class:`rewards.pool.WorkerPool` owned by this module: one
worker, started on first use in the *calling* process and reused afterwards. When a
call passes its limit, the pool kills the worker (and its process group) and starts
a fresh one.

This works both in a plain process and inside a ``score_batch`` worker (the math
verifier then owns a small pool of its own inside that worker; reward workers are
plain, non-daemonic subprocesses, so they may start one). Keep the SymPy limit below
the batch's per-item timeout, so a hung comparison is killed here (and reported as
this verifier's ``timeout``) before the batch kills the whole item. If the batch does
kill the item's worker, the SymPy worker below it dies too (``PR_SET_PDEATHSIG`` on
Linux; elsewhere it exits when its pipe closes, once its current call returns).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable
from typing import Any

from rewards.pool import CallOutcome, WorkerPool

_pools: dict[int, WorkerPool] = {}  # by process id: a forked child must not reuse its parent's pool
_lock = threading.Lock()


def sympy_pool() -> WorkerPool:
    """This process's SymPy pool (one worker), started on first use."""
    pid = os.getpid()
    with _lock:
        pool = _pools.get(pid)
        if pool is None or pool._closed:
            pool = WorkerPool(num_workers=1)
            _pools[pid] = pool
            atexit.register(pool.close)  # a graceful stop; the pool also kills its worker if GC'd
        return pool


WARM_UP_TIMEOUT = 120.0
"""Seconds a fresh worker may take to import SymPy and the LaTeX parser."""
_warm: set[int] = set()  # ids of pools whose worker has imported SymPy


def run_limited(fn: Callable[..., Any], *args: Any, timeout: float) -> CallOutcome:
    """``fn(*args)`` in the SymPy worker, killed after ``timeout`` seconds.

    A fresh worker (the first one, or the replacement of one that was killed) first
    imports SymPy in a separate warm-up call, so that its start-up (seconds on a busy
    machine) never counts against the limit of a comparison."""
    pool = sympy_pool()
    if id(pool) not in _warm:
        warm = pool.map(_in_worker, [(_warm_up, ())], WARM_UP_TIMEOUT)[0]
        if warm.status != "ok":
            return warm
        _warm.add(id(pool))
    outcome = pool.map(_in_worker, [(fn, args)], timeout)[0]
    if outcome.status != "ok":
        _warm.discard(id(pool))  # the worker was killed or died: its replacement starts cold
    return outcome


def _warm_up() -> None:
    from rewards.math.symbolic import to_sympy

    to_sympy("x^2 + \\frac{1}{2}")


def _in_worker(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    _die_with_parent()
    return fn(*args)


_parent_watch_set = False


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when its parent dies, so a worker stuck
    in SymPy does not outlive a verifier process that was itself killed."""
    global _parent_watch_set
    if _parent_watch_set:
        return
    _parent_watch_set = True
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the worker exits when its pipe closes instead
