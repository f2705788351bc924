"""A benchmark's fresh interpreter: run where the user ran the benchmark, importing this checkout's code.

A benchmark that measures in a fresh process (a training run, a peak-RSS worker) starts ``sys.executable``
in the caller's working folder, so the paths a user passes (``--workdir runs``,
``model.name_or_path=./my_model``, ``task.data_dir=../shared/data``) mean there what they mean to the
benchmark itself. The child imports ``reasoning_rl`` and ``benchmarks`` from the checkout the benchmark
was imported from (its root first on ``PYTHONPATH``), whichever folder that is, installed or not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default ``os.environ``) with this checkout's root first on ``PYTHONPATH``."""
    out = dict(os.environ if env is None else env)
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO_ROOT)]
    out["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *rest])
    return out
