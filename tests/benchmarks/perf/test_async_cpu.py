"""``python -m benchmarks.perf.async_cpu``: the per-process CPU seconds it reads from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.perf.async_cpu import processes


def test_processes_reads_parent_cpu_seconds_and_command_line_from_proc():
    """A child that burns about 0.3 s of CPU shows up under this process with at least 0.2 s, and this
    process with its own parent."""
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            table = processes()
            if table[child.pid][1] >= 0.2:
                break
            time.sleep(0.2)
        ppid, seconds, cmdline = table[child.pid]
        assert ppid == os.getpid() and seconds >= 0.2 and "time.process_time" in cmdline
        assert table[os.getpid()][0] == os.getppid()
    finally:
        child.kill()
        child.wait()
