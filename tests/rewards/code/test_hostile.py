"""One adversarial program per defended property (rewards/code/hostile.py), at every level.

The strongest level must contain every case. Fallback levels are forced (as when bwrap is
missing) and must contain the cases their docstring promises; the rest are documented gaps.
"""

from __future__ import annotations

import pytest

from rewards.code.hostile import CASES, run_suite
from rewards.code.sandbox import SandboxError, detect_isolation


def level_or_skip(level: str) -> str:
    """The level, or skip the test when it does not work here (bwrap not installed...)."""
    try:
        return detect_isolation(level)
    except SandboxError as exc:
        pytest.skip(str(exc))


# What a fallback level does NOT protect (see rewards/code/sandbox/__init__.py): without namespaces,
# the network and world-writable folders (/var/tmp) are the host's.
KNOWN_GAPS = {"bwrap": set(), "unshare": set(), "rlimits": {"network_connect", "write_outside_tmp"}}


@pytest.fixture(scope="module", params=["bwrap", "unshare", "rlimits"])
def suite(request: pytest.FixtureRequest) -> dict[str, dict]:
    level = level_or_skip(request.param)
    cases = CASES if level == "bwrap" else tuple(c for c in CASES if c.name not in ("fork_bomb", "memory_bomb"))
    return {"level": level, "rows": {r["case"]: r for r in run_suite(level, cases)}}


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_hostile_program_is_contained(suite: dict, case: str) -> None:
    row = suite["rows"].get(case)
    if row is None:
        pytest.skip(f"{case} runs at the strongest level only (keeps the suite fast)")
    if case in KNOWN_GAPS[suite["level"]]:
        pytest.xfail(f"{suite['level']} does not protect this: {row['why']}")
    assert row["contained"], f"{case} at {suite['level']}: {row['why']}"


@pytest.mark.parametrize("case", [c.name for c in CASES if c.tamper])
def test_hostile_program_is_flagged_with_its_tamper_kinds(suite: dict, case: str) -> None:
    # Each attempt the program makes is reported (rewards/code/sandbox/inside/tamper.py), at every level.
    row = suite["rows"].get(case)
    if row is None:
        pytest.skip(f"{case} runs at the strongest level only")
    expected = set(next(c for c in CASES if c.name == case).tamper)
    assert expected <= set(row["result"].tamper), (case, row["result"].tamper)
