"""The fault battery's shared pieces: the tiny command line and how a user runs it.

Each case runs ``reasoning-rl-train`` (the installed console script, as a user would) on a tiny
model and checks what the issue that started this battery promised: one line naming the problem,
exit code 2, no data lost (issue 42). A new setting or a new subprocess gets its case here."""

import os
import subprocess
import sys
from pathlib import Path

from tests.reasoning_rl.conftest import TINY_OVERRIDES

TRAIN = str(Path(sys.executable).with_name("reasoning-rl-train"))
"""The console script of this environment (not ``python -m``, which would put the working directory on sys.path)."""

PROG = "reasoning-rl-train: "

TINY = [*TINY_OVERRIDES, "algo.group_size=2", "trainer.steps=2", "trainer.save_every=1"]
"""A run of two steps that takes a few seconds on one core."""


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def train(cwd: Path, *args: str, extra_env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess:
    """``reasoning-rl-train *TINY *args`` in ``cwd``."""
    return subprocess.run([TRAIN, *TINY, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=env(**(extra_env or {})))


def start(cwd: Path, *args: str) -> subprocess.Popen:
    """The same command, started in the background."""
    return subprocess.Popen([TRAIN, *TINY, *args], cwd=cwd, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env())


def refusal(out: subprocess.CompletedProcess) -> str:
    """The one line a refused command ends with: exit code 2, no traceback."""
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]  # the checkpoint writer may print a progress bar before it
    assert line.startswith(PROG), out.stderr[-3000:]
    return line[len(PROG):]
