"""The harness: runs in the zygote Z, trusted, and never runs the program.

It compiles and runs the TESTS (setup code, the prompt's helpers, ``check()``, assert lines);
``candidate(...)`` / ``f(...)`` in them is a :class:`~.values.RemoteFunction` that sends
plain-data arguments to C over a private socket pair and decodes C's plain-data reply with
trusted code. The assertions, the comparisons and the verdict all happen here. This module
never reads the program's text: only C (:mod:`.candidate`) executes it.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from .prefetch import PlannedCall, plan
from .tamper import KINDS
from .values import RemoteFunction, RemoteRef, decode, encode
from .wire import sock_recv, sock_send


class _Deadline(BaseException):
    """The program's wall-clock time is up: abort the remaining tests."""


class _Gone(BaseException):
    """C died or broke the protocol: abort the remaining tests."""


class _Forged(_Gone):
    """C sent a frame the protocol does not allow: the program wrote on the channel itself."""


class _Diverged(BaseException):
    """The test did not make the calls planned from its source (:mod:`.prefetch`): run again without."""


class CandidateError(Exception):
    """The program raised an exception of a non-builtin type (name and message only)."""


_MAPPED_EXCEPTIONS = {
    name: obj for name, obj in vars(__import__("builtins")).items()
    if isinstance(obj, type) and issubclass(obj, Exception) and obj not in (StopIteration, StopAsyncIteration)
}


class Channel:
    """The harness's end of the socket to C, with the program's deadline on every wait."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.handles: dict[int, RemoteRef] = {}
        self.tamper: set[str] = set()
        """Tamper kinds C reported (:mod:`.tamper`) and those seen here (a forged frame)."""
        self.plan: list[dict[str, Any]] = []
        """Call messages the test is expected to make first (:mod:`.prefetch`), not yet sent."""
        self.pending: deque[dict[str, Any]] = deque()
        """Planned calls sent to C whose replies the test has not taken yet."""

    def recv(self) -> Any:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Deadline
        self.sock.settimeout(left)
        try:
            msg = sock_recv(self.sock)
        except TimeoutError:
            raise _Deadline from None
        except ValueError as exc:
            raise _Forged(f"the program broke the protocol: {exc!r}") from None
        except OSError as exc:
            raise _Gone(f"the program broke the protocol: {exc!r}") from None
        if msg is None:
            raise _Gone("the program's process ended")
        if not isinstance(msg, dict):
            raise _Forged("the program broke the protocol")
        kinds = msg.get("tamper")
        if isinstance(kinds, list):
            self.tamper.update(k for k in kinds if isinstance(k, str) and k in KINDS)
        return msg

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
            sock_send(self.sock, msg)
        except TimeoutError:
            raise _Deadline from None
        except OSError:
            raise _Gone("the program's process ended") from None
        return self.recv()

    def handle(self, ref: int, type_name: str, is_callable: bool, truth: bool | None) -> RemoteRef:
        if ref not in self.handles:
            self.handles[ref] = (RemoteFunction(self, ["r", ref], type_name) if is_callable
                                 else RemoteRef(ref, type_name, truth))
        return self.handles[ref]

    def _value(self, reply: dict[str, Any]) -> Any:
        if "value" in reply:
            try:
                return decode(reply["value"], self)
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
        raise _Forged("the program broke the protocol")

    def call(self, target: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        payload = _call_message(target, args, kwargs)
        if self.pending:  # C already ran this call (or the plan was wrong)
            if payload != self.pending[0]:
                raise _Diverged
            self.pending.popleft()
            return self._value(self.recv())
        if self.plan:
            planned, self.plan = self.plan, []
            if payload == planned[0]:  # send every planned call at once; C streams the replies
                self.pending.extend(planned[1:])
                return self._value(self.request({"op": "batch", "calls": planned}))
        return self._value(self.request(payload))

    def get(self, name: str) -> Any:
        if self.pending:  # C may have run calls the test has not made yet: its globals could differ
            raise _Diverged
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


def _call_message(target: list[Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {"op": "call", "target": target, "args": [encode(a, {}, False) for a in args],
            "kwargs": {str(k): encode(v, {}, False) for k, v in kwargs.items()}}


_BUILTIN_NAMES = frozenset(vars(__import__("builtins")))


class _TrustedGlobals(dict):
    """Globals of the test code: trusted definitions first (setup code, the prompt), builtins
    never taken from the program (a program-level ``abs = lambda x: 0`` must not reach the
    tests), anything else (the function under test) fetched from C as a remote function."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self.channel = channel

    def __missing__(self, name: str) -> Any:
        if name in _BUILTIN_NAMES or name.startswith("__"):
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
_PLANS: dict[tuple[str, str, tuple[str, ...]], list[PlannedCall]] = {}


def _compiled(source: str, kind: str) -> Any:
    """Compiled trusted code, cached: in RL the same tests score every sample of a group."""
    key = (kind, source)
    if key not in _COMPILED:
        if len(_COMPILED) > 2048:
            _COMPILED.clear()
        _COMPILED[key] = _check_units(source) if kind == "check" else compile(source, f"<{kind}>", "exec")
    return _COMPILED[key]


def _planned_calls(kind: str, sources: Sequence[str], names: Sequence[str]) -> list[dict[str, Any]]:
    """The call messages :func:`.prefetch.plan` expects the test to make first (cached by source).

    ``check``: ``sources`` is the test code, ``names`` the entry point (called as ``candidate`` or
    by its name); ``asserts``: one source per assert line, ``names`` the functions under test."""
    import ast

    key = (kind, "\0".join(sources), tuple(names))
    if key not in _PLANS:
        if len(_PLANS) > 2048:
            _PLANS.clear()
        if kind == "check":
            check = [n for n in ast.parse(sources[0]).body if isinstance(n, ast.FunctionDef) and n.name == "check"][-1]
            callees = {names[0]: names[0]}
            if check.args.args:
                callees[check.args.args[0].arg] = names[0]
            statements: list[ast.stmt] = check.body
        else:
            callees = {n: n for n in names}
            statements = [stmt for src in sources for stmt in ast.parse(src).body]
        _PLANS[key] = plan(statements, callees)
    return [_call_message(["n", name], args, kwargs) for name, args, kwargs in _PLANS[key]]


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


def harness(sock: socket.socket, job: dict[str, Any], deadline: float, prefetch: bool = True) -> dict[str, Any]:
    """The harness (in Z): run the trusted tests against C's functions; return the verdict.

    ``prefetch``: send the calls planned from the test's source in one message (:mod:`.prefetch`).
    ``{"rerun": True}`` when the test did not make them: the caller runs the program again, fresh,
    with ``prefetch=False``."""
    channel = Channel(sock, deadline)
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
    ended = False
    detail = ""
    try:
        hello = channel.recv()
        if "load_error" in hello:
            return {"status": "error", "passed": 0, "total": total, "tamper": sorted(channel.tamper),
                    "detail": f"the program failed to load: {hello['load_error']}"}
        if not hello.get("ready"):
            raise _Forged("the program broke the protocol")
        ns = _TrustedGlobals(channel)
        ns["__name__"] = "__test__"
        try:
            exec(setup, ns)
        except Exception as exc:
            return {"harness_error": f"the setup code raised {exc!r}"}
        # The functions under test come from the program even when the prompt (run above) defined
        # a stub of the same name, or the name is a builtin (MBPP's `def sum(...)`).
        under_test = [suite["entry_point"]] if units is None else _functions_under_test(suite["asserts"], ns)
        for name in under_test:
            ns[name] = RemoteFunction(channel, ["n", name])
        if prefetch:
            sources = [suite["code"]] if units is None else suite["asserts"]
            try:
                channel.plan = _planned_calls(suite["kind"], sources, under_test)
            except (ValueError, TypeError, KeyError, IndexError, OverflowError):
                channel.plan = []  # an argument we cannot send ahead: the test makes its calls itself
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
        if channel.pending:
            raise _Diverged
    except _Diverged:
        return {"rerun": True}
    except _Deadline:
        status = "timeout"
    except _Gone as exc:
        status, detail = "error", str(exc)
        if isinstance(exc, _Forged):
            channel.tamper.add("harness_objects")
        ended = not isinstance(exc, _Forged) and str(exc) == "the program's process ended"
    passed = sum(results)
    if status == "failed" and passed == total and len(results) == total:
        status = "passed"
    return {"status": status, "passed": passed, "total": total, "detail": detail,
            "tamper": sorted(channel.tamper), "ended_early": ended}
