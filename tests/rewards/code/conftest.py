"""Fixtures for the code-sandbox tests: one sandbox per isolation level, shared by a module."""

from __future__ import annotations

import pytest

from rewards.code.sandbox import Sandbox, SandboxError, detect_isolation


def level_or_skip(level: str) -> str:
    try:
        return detect_isolation(level)
    except SandboxError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def box() -> Sandbox:
    """A sandbox at the strongest level this machine offers."""
    with Sandbox() as sandbox:
        yield sandbox
