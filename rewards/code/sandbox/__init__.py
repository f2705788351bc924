"""The trust boundary: every untrusted program in reasoning-rl runs through this package.

Nothing else in the repository executes model-written code, and inside this package only
:mod:`.inside.candidate` does (tests/rewards/code/test_sandbox_structure.py checks both).
Layout, by job:

* :mod:`.host` -- the parent process: :class:`Sandbox` (one zygote, reused) and
  :class:`SandboxPool`; sends jobs, turns replies into an :class:`ExecutionResult`;
* :mod:`.jail` -- the isolation levels and the command line that builds each one;
* :mod:`.results` -- :class:`Limits`, :class:`ExecutionResult`, :class:`SandboxError`;
* :mod:`.inside` -- standard library only, the code that runs in the jail (zygote, harness,
  program server, candidate), and :mod:`.inside.wire`, the one message framing used by both
  sides. It is imported in the jail as the top-level package ``inside``
  (``python -I -S -B -c BOOT ROOT CONFIG``, see :mod:`.jail`).

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
* time: CPU time (RLIMIT_CPU = ceil(timeout), SIGKILL), and a wall-clock backstop of
  ``timeout * 1.5 + 1 s`` (:mod:`.inside.clock`) enforced from outside (P kills C, the harness
  stops waiting, the host kills the whole sandbox if Z does not answer).
* false negatives: C's own directory is its ``$TMPDIR`` and ``tempfile.tempdir`` (temporary
  files work); its files are capped by RLIMIT_FSIZE, the directory by the jail's 256 MiB /tmp.

Reported (not only refused): attempts to game the tests, per program (:mod:`.inside.tamper`).

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

from .host import Sandbox, SandboxPool, default_workers
from .inside.harness import CandidateError
from .jail import ENV_LEVEL, LEVELS, IsolationLevel, detect_isolation
from .results import ExecStatus, ExecutionResult, Limits, SandboxError

__all__ = [
    "ENV_LEVEL",
    "LEVELS",
    "CandidateError",
    "ExecStatus",
    "ExecutionResult",
    "IsolationLevel",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "default_workers",
    "detect_isolation",
]
