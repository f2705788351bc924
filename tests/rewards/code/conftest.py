"""Fixtures for the code-sandbox tests."""

from __future__ import annotations

import pytest

from rewards.code.sandbox import Sandbox


@pytest.fixture(scope="module")
def box() -> Sandbox:
    """A sandbox at the strongest level this machine offers (or $REASONING_RL_SANDBOX)."""
    with Sandbox() as sandbox:
        yield sandbox
