"""Shared test fixtures: where the benchmark data lies, GPU skipping."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _find_shared_data() -> Path | None:
    candidates = [os.environ.get("REASONING_RL_DATA"), REPO_ROOT.parent / "shared" / "data", REPO_ROOT / "shared" / "data"]
    for c in candidates:
        if c and Path(c, "math500.jsonl").exists():
            return Path(c)
    return None


SHARED_DATA = _find_shared_data()


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """`../shared/data` (or $REASONING_RL_DATA): MATH-500, GSM8K, HumanEval, MBPP, AIME24, math_equiv."""
    if SHARED_DATA is None:
        pytest.skip("benchmark data not found: set REASONING_RL_DATA to the folder holding math500.jsonl")
    return SHARED_DATA


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
