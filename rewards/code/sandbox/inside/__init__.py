"""The part of the sandbox that runs inside the jail. Standard library only.

The host never runs this code except :mod:`.wire` (the one framing, shared by both sides). In
the jail it is imported as the top-level package ``inside`` (bound read-only at
``/sandbox/inside`` under ``bwrap``) and started by :func:`.zygote.main`:

* :mod:`.zygote` -- Z: forks P, receives jobs from the host, judges stdin/stdout outputs;
* :mod:`.harness` -- in Z: runs the trusted tests against C's functions, never the program;
* :mod:`.server` -- P: forks a warm C per program, watches it, reports, cleans up;
* :mod:`.candidate` -- C: locks itself down and executes the program (the only module that does);
* :mod:`.values` -- the plain-data encoding of the values C and the harness exchange;
* :mod:`.wire` -- the framing of every message (host <-> Z pipes, Z/P/C sockets);
* :mod:`.namespaces` -- the jail set-up done from inside (private mounts, PID-namespace probe).
"""
