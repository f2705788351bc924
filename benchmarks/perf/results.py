"""Every benchmark's figures, appended to a JSONL file so runs on different commits can be compared.

Each line is one run: ``bench`` (its name), ``date`` (UTC, ISO 8601), ``commit`` (``git
rev-parse HEAD`` of the checkout, ``dirty`` when it has uncommitted changes), ``machine``
(CPU model, cores, OS, Python and torch versions, torch threads, torch's CPU capability), ``args`` (the parsed
command line) and ``figures`` (the numbers the benchmark printed). A line is written with a
single ``write`` on a file opened for appending, under an exclusive ``flock``: two benchmarks
finishing at once never interleave their lines, and a crash never leaves half a line behind
the ones already written. The last line a benchmark prints is the same record, prefixed
``BENCH_RESULT``, for scripts that read its output.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_RESULTS = "bench_results.jsonl"
RESULT_PREFIX = "BENCH_RESULT"


@dataclass
class BenchResult:
    """What a benchmark's ``run(argv)`` returns: its exit code, parsed arguments and figures."""

    code: int
    args: dict[str, Any]
    figures: dict[str, Any] = field(default_factory=dict)


def git_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The checkout's commit and whether it has uncommitted changes (None outside a git checkout)."""
    def git(*cmd: str) -> str | None:
        try:
            out = subprocess.run(["git", *cmd], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Where the figures were measured."""
    info: dict[str, Any] = {"cpu": _cpu_model(), "cores": os.cpu_count(), "os": platform.platform(),
                            "python": platform.python_version()}
    with contextlib.suppress(ImportError):
        import torch

        # The kernel set torch dispatches to (AVX512, AVX2, DEFAULT; ATEN_CPU_CAPABILITY forces a lower one):
        # float results, and so training curves, differ between kernel sets (docs/numerics.md).
        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    cpu_capability=torch.backends.cpu.get_cpu_capability())
    return info


def make_record(bench: str, result: BenchResult) -> dict[str, Any]:
    return {"bench": bench, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            **git_commit(), "machine": machine_info(), "args": result.args, "figures": result.figures}


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append ``record`` as one JSON line: one ``os.write`` under an exclusive lock (see module docstring)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, default=str, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)  # closing releases the lock


def read_records(path: str | Path, bench: str | None = None) -> list[dict[str, Any]]:
    """The records of ``path`` (of one benchmark when ``bench`` is given), oldest first."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [r for r in records if bench is None or r["bench"] == bench]


def results_arguments(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """``--results PATH`` / ``--no-results`` (shared by every benchmark) and the remaining arguments."""
    # No abbreviations: a benchmark's own --n is not a prefix of --no-results here.
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--results", default=DEFAULT_RESULTS,
                        help=f"JSONL file the run's record is appended to (default ./{DEFAULT_RESULTS})")
    parser.add_argument("--no-results", action="store_true", help="do not append the record anywhere")
    return parser.parse_known_args(list(argv))


RESULTS_HELP = (f"Every run appends one JSON line to --results PATH (default ./{DEFAULT_RESULTS}; --no-results "
                "to skip) and prints it last, prefixed " + RESULT_PREFIX + ".")


def run_and_record(bench: str, run: Callable[[list[str]], BenchResult], argv: Sequence[str]) -> int:
    """Run one benchmark, append its record to the results file, print the record as the last line."""
    options, rest = results_arguments(argv)
    if not options.no_results:
        # A results file that cannot be written is found now, not after the benchmark has run.
        folder = Path(options.results).parent
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(errno.EACCES, "cannot write the results file's folder", str(folder))
    result = run(rest)
    record = make_record(bench, result)
    if not options.no_results:
        append_record(options.results, record)
        print(f"appended to {options.results}")
    print(f"{RESULT_PREFIX} {json.dumps(record, default=str, sort_keys=True)}", flush=True)
    return result.code
