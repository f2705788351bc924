"""The VerifierResult contract: score and status stay consistent."""

import pytest

from rewards import VerifierResult, as_result


def test_constructors_set_score_and_status():
    assert VerifierResult.ok(1) == VerifierResult(1.0, "ok", {})
    r = VerifierResult.unscorable("gold has no answer", gold="?")
    assert (r.score, r.status, r.info["reason"], r.info["gold"]) == (None, "unscorable", "gold has no answer", "?")
    assert VerifierResult.timeout(2.0).status == "timeout"
    assert VerifierResult.error("boom").info["reason"] == "boom"


@pytest.mark.parametrize(
    "score, status",
    [(None, "ok"), (0.0, "unscorable"), (1.0, "timeout"), (1.0, "nonsense")],
)
def test_inconsistent_results_are_rejected(score, status):
    with pytest.raises(ValueError):
        VerifierResult(score, status)


def test_as_result_normalises_plain_returns():
    assert as_result(True) == VerifierResult.ok(1.0)
    assert as_result(0) == VerifierResult.ok(0.0)
    assert as_result(None).status == "unscorable"  # never silently 0
    with pytest.raises(TypeError, match="must return"):
        as_result("yes")
