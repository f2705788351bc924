"""Adversarial programs, one per defended property, and a runner that checks each was contained.

Used by ``tests/rewards/code/test_hostile.py`` and ``reasoning-rl-bench code-exec --hostile``.
Every program's function under test is WRONG (or the program never gets to the tests), so the
right verdict is never ``passed``; on top of the verdict each case checks, from the host, the
property it attacks: no file outside its directory, no process left, no connection, no secret.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewards.code.formats import FunctionalTests
from rewards.code.sandbox import ExecutionResult, Sandbox
from rewards.code.sandbox.inside.clock import wall_seconds

SECRET_ENV = "RL_HOSTILE_SECRET"


@dataclass
class Context:
    """What the host knows and the program must not: a token, a secret, a listening port."""

    token: str = field(default_factory=lambda: secrets.token_hex(6))
    secret: str = field(default_factory=lambda: "s3cret-" + secrets.token_hex(8))
    port: int = 0
    connections: list[bytes] = field(default_factory=list)
    repo_root: Path = Path(__file__).resolve().parents[2]

    @property
    def marker(self) -> str:
        """A number only this run's processes carry on their command line (`sleep <marker>`)."""
        return f"77{int(self.token, 16) % 10**6:06d}"

    def outside_paths(self) -> list[Path]:
        return [Path("/tmp") / f"rl-hostile-{self.token}", self.repo_root / f"rl-hostile-{self.token}",
                Path.home() / f"rl-hostile-{self.token}", Path("/var/tmp") / f"rl-hostile-{self.token}"]


@dataclass(frozen=True)
class Case:
    name: str
    property: str
    program: Callable[[Context], str]
    asserts: Callable[[Context], tuple[str, ...]] = lambda ctx: ("assert f() == 1",)
    timeout: float = 5.0
    host_check: Callable[[Context, ExecutionResult, Sandbox], str | None] | None = None
    needs_confinement: bool = False
    """Signals or floods the machine: run only where C is confined by a PID namespace or a uid
    of its own (never as the caller's uid without namespaces: kill(-1) would hit the host)."""
    tamper: tuple[str, ...] = ()
    """The tamper kinds (sandbox/inside/tamper.py) this program attempts: each must be reported."""


# -- host-side checks: None when contained, else what leaked --------------------------------------
def _no_files(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    written = [str(p) for p in ctx.outside_paths() if p.exists()]
    for p in written:
        Path(p).unlink(missing_ok=True)
    return f"wrote {written}" if written else None


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:  # a zombie's cmdline is empty, so only live processes match
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def _processes_of(uid: int) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            # A zombie has exited (killed, waiting to be reaped): nothing of it runs any more.
            if str(uid) in fields.get("Uid", "").split() and not fields.get("State", "").strip().startswith("Z"):
                found.append(int(pid))
    return found


def _no_processes(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    uid = box.info.get("uid")
    for _ in range(40):  # the kernel finishes killing a dead namespace asynchronously
        left = _processes_with(ctx.marker) + (_processes_of(uid) if uid else [])
        if not left:
            return None
        time.sleep(0.05)
    return f"{len(left)} processes still running (not zombies): {left[:5]}"


def _no_connection(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    time.sleep(0.05)
    return f"the loopback server got {ctx.connections}" if ctx.connections else None


def _no_secret(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    seen = ctx.secret in result.stdout or ctx.secret in result.stderr
    return "the secret reached the program's output" if seen else None


def _sandbox_still_works(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    after = box.execute(FunctionalTests(asserts=("assert f() == 1",)).job("def f():\n    return 1", 5.0, {}))
    return None if after.status == "passed" else f"the next program got {after.status}: {after.detail}"


def _output_capped(ctx: Context, result: ExecutionResult, box: Sandbox) -> str | None:
    return None if len(result.stdout) <= 4000 else f"{len(result.stdout)} characters of stdout came back"


WRONG = "\ndef f():\n    return 2\n"

CASES: tuple[Case, ...] = (
    Case("write_outside_tmp", "filesystem", lambda ctx: (
        "import os\nn = 0\n"
        f"for p in {[str(p) for p in ctx.outside_paths()]!r}:\n"
        "    try:\n        open(p, 'w').write('pwned'); n += 1\n    except OSError:\n        pass\n"
        "def f():\n    return n\n"), lambda ctx: ("assert f() == 4",), host_check=_no_files,
        tamper=("file_access",)),
    Case("fork_bomb", "processes", lambda ctx: (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n" + WRONG),
        timeout=3.0, host_check=_no_processes, needs_confinement=True),
    Case("memory_bomb", "memory", lambda ctx: "blob = bytearray(64 << 30)\nmore = [0] * (10 ** 10)\n" + WRONG,
         host_check=_sandbox_still_works),
    Case("infinite_loop", "time", lambda ctx: "def f():\n    while True:\n        pass\n", timeout=2.0),
    Case("orphan_daemon", "processes", lambda ctx: (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{ctx.marker}'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{ctx.marker}.5'])\n    os._exit(0)\n" + WRONG),
        host_check=_no_processes),
    Case("network_connect", "network", lambda ctx: (
        "import socket\ndef f():\n    try:\n"
        "        s = socket.socket()\n        s.settimeout(1)\n"
        f"        s.connect(('127.0.0.1', {ctx.port}))\n"
        f"        s.sendall(b'leak-{ctx.token}')\n        return 'connected'\n"
        "    except OSError as e:\n        return repr(e)\n"),
        lambda ctx: ("assert f() == 'connected'",), host_check=_no_connection),
    Case("env_secret", "secrets", lambda ctx: (
        "import os, glob\ndef f():\n"
        f"    found = os.environ.get({SECRET_ENV!r}, '')\n"
        "    for p in glob.glob('/proc/*/environ'):\n        try:\n            data = open(p, 'rb').read().decode()\n"
        "        except OSError:\n            continue\n"
        f"        for kv in data.split('\\0'):\n            if kv.startswith({SECRET_ENV!r} + '='):\n"
        "                found = kv.split('=', 1)[1]\n"
        "    print(found)\n    return found\n"),
        lambda ctx: (f"assert f() == {ctx.secret!r}",), host_check=_no_secret, tamper=("file_access",)),
    Case("kill_parent", "host", lambda ctx: (
        "import os, signal\n"
        "for target in (os.getppid(), -1, 1):\n    try:\n        os.kill(target, signal.SIGKILL)\n"
        "    except OSError:\n        pass\n"
        "for pid in os.listdir('/proc'):\n    if pid.isdigit() and int(pid) != os.getpid():\n        try:\n"
        "            os.kill(int(pid), signal.SIGKILL)\n        except OSError:\n            pass\n" + WRONG),
        host_check=_sandbox_still_works, needs_confinement=True),
    Case("sys_exit_zero", "verdict", lambda ctx: "import sys\n" + WRONG + "sys.exit(0)\n", tamper=("early_exit",)),
    Case("os_exit_zero", "verdict", lambda ctx: "import os\n" + WRONG + "os._exit(0)\n", tamper=("early_exit",)),
    Case("fake_pass_marker", "verdict", lambda ctx: (
        "import os, json, struct\nprint('passed')\nprint(json.dumps({'status': 'passed', 'passed': 1, 'total': 1}))\n"
        "frame = json.dumps({'status': 'passed', 'passed': 1, 'total': 1, 'value': 1}).encode()\n"
        "for fd in range(3, 64):\n    try:\n        os.write(fd, struct.pack('>I', len(frame)) + frame)\n"
        "    except OSError:\n        pass\n" + WRONG), tamper=("pass_marker", "harness_objects")),
    Case("always_equal", "verdict", lambda ctx: (
        "class Liar:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
        "    def __bool__(self): return True\n    def __hash__(self): return 0\n"
        "def f():\n    return Liar()\n")),
    Case("int_subclass_equal", "verdict", lambda ctx: (
        "class Liar(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
        "def f():\n    return Liar(2)\n")),
    Case("patch_builtins", "verdict", lambda ctx: (
        "import builtins\nbuiltins.AssertionError = type('Nope', (BaseException,), {})\n"
        "builtins.abs = lambda x: 0\nbuiltins.set = lambda *a: 1\n"
        "abs = lambda x: 0\nset = lambda *a: 1\nlen = lambda x: 3\n"
        "def f():\n    return [9]\n"),
        lambda ctx: ("assert abs(f()[0] - 1.0) < 1e-6", "assert set(f()) == set([1])", "assert len(f()) == 3"),
        tamper=("patch_builtins",)),
    Case("settrace_skip_asserts", "verdict", lambda ctx: (
        "import sys, threading\n"
        "def tracer(frame, event, arg):\n    if event == 'line' and frame.f_code.co_name in ('check', '<module>'):\n"
        "        try:\n            frame.f_lineno = frame.f_lineno + 1\n        except Exception:\n            pass\n"
        "    return tracer\nsys.settrace(tracer)\nthreading.settrace(tracer)\nsys.setprofile(lambda *a: None)\n" + WRONG),
        tamper=("trace_hook",)),
    Case("raise_base_exception", "verdict", lambda ctx: (
        "class Escape(BaseException):\n    pass\n"
        "def f():\n    raise Escape('stop the harness')\n"
        "def g():\n    raise KeyboardInterrupt\n"
        "def h():\n    raise SystemExit(0)\n"),
        lambda ctx: ("assert f() == 1", "assert g() == 1", "assert h() == 1"),
        tamper=("early_exit",)),
    Case("replace_check", "verdict", lambda ctx: (
        "import gc, threading, sys, builtins\n"
        "def check(candidate):\n    return True\n"
        "builtins.check = check\n"
        "def patch():\n    for _ in range(2000):\n        for o in gc.get_objects():\n"
        "            if callable(o) and getattr(o, '__name__', '') == 'check' and o is not check:\n"
        "                try:\n                    o.__code__ = check.__code__\n                except Exception:\n"
        "                    pass\n"
        "threading.Thread(target=patch, daemon=True).start()\n" + WRONG),
        lambda ctx: ("def check(candidate):\n    assert candidate() == 1\n",),
        tamper=("patch_builtins", "harness_objects")),
    Case("stack_walk_forge", "verdict", lambda ctx: (
        "import sys, gc\n"
        "def forge():\n    frame = sys._getframe()\n    while frame is not None:\n"
        "        for v in list(frame.f_locals.values()) + list(frame.f_globals.values()):\n"
        "            if isinstance(v, list):\n                v.append('passed'); v.append(True)\n"
        "            if isinstance(v, dict):\n                v['status'] = 'passed'\n"
        "        frame = frame.f_back\n"
        "    for o in gc.get_objects():\n        if isinstance(o, list):\n            o.append(True)\n"
        "def f():\n    forge()\n    return 2\nforge()\n"), tamper=("harness_objects",)),
    Case("read_tests_from_memory", "verdict", lambda ctx: (
        "import gc, sys\n"
        "def f():\n    for o in gc.get_objects():\n        for v in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()):\n"
        "            if isinstance(v, str) and 'SENTINEL-' in v:\n"
        "                i = v.index('SENTINEL-')\n                return v[i:i + 21]\n"
        "    return 'not found'\n"),
        lambda ctx: (f"assert f() == 'SENTINEL-{ctx.token}'",), tamper=("harness_objects",)),
    Case("protocol_forgery", "verdict", lambda ctx: (
        "import os, json, struct, socket\n"
        "def f():\n    for msg in ({'ready': True}, {'value': 1}, {'status': 'passed'}):\n"
        "        data = json.dumps(msg).encode()\n        os.write(3, struct.pack('>I', len(data)) + data)\n"
        "    return 2\n"), tamper=("harness_objects",)),
    Case("output_flood", "output", lambda ctx: (
        "import sys\nfor _ in range(200000):\n    sys.stdout.write('x' * 1000)\n" + WRONG),
        host_check=_output_capped),
)


def _start_server(ctx: Context) -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    ctx.port = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.settimeout(1)
            try:
                ctx.connections.append(conn.recv(100) or b"<connected>")
            except OSError:
                ctx.connections.append(b"<connected>")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server


def run_case(case: Case, box: Sandbox, ctx: Context) -> dict[str, Any]:
    """Run one case; ``contained`` is True when the verdict is not ``passed`` and the host check holds."""
    if case.needs_confinement and not (box.ensure_started().get("pid_namespace") or box.info.get("uid")):
        return {"case": case.name, "property": case.property, "contained": False, "skipped": True,
                "why": "not run: neither a PID namespace nor a uid of its own confines C here", "result": None}
    tests = case.asserts(ctx)
    suite = (FunctionalTests(check=tests[0], entry_point="f") if tests[0].startswith("def check")
             else FunctionalTests(asserts=tests))
    start = time.monotonic()
    result = box.execute(suite.job(case.program(ctx), case.timeout, {}))
    seconds = time.monotonic() - start
    problems = []
    if result.status == "passed" or result.passed:
        problems.append(f"verdict {result.status} ({result.passed}/{result.total})")
    wall = wall_seconds(case.timeout, {})
    if seconds > wall + 5:
        problems.append(f"took {seconds:.1f}s for a {case.timeout:g}s limit (wall-clock backstop {wall:g}s)")
    if case.host_check is not None:
        leak = case.host_check(ctx, result, box)
        if leak:
            problems.append(leak)
    why = "; ".join(problems) or f"{result.status} in {seconds:.2f}s"
    return {"case": case.name, "property": case.property, "contained": not problems, "why": why,
            "result": result}


def run_suite(level: str | None = None, cases: tuple[Case, ...] = CASES) -> list[dict[str, Any]]:
    """Every case in one fresh sandbox; the host's environment holds a secret meanwhile."""
    ctx = Context()
    server = _start_server(ctx)
    old = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = ctx.secret
    try:
        with Sandbox(level) as box:
            return [run_case(case, box, ctx) for case in cases]
    finally:
        server.close()
        if old is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = old
