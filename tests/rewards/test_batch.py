"""score_batch: parallel, ordered, hard per-item timeouts enforced from outside, crashes contained."""

import time

import pytest

from rewards import VerifierResult, WorkerPool, get_verifier, run_with_timeout, score_batch
from tests.rewards.verifiers_for_tests import echo_float, misbehaving


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2) as p:
        yield p


def test_results_are_in_order_and_normalised(pool):
    batch = score_batch(echo_float, ["a", "b", "c"], ["a", "x", "c"], pool=pool)
    assert batch.scores == [1.0, 0.0, 1.0]
    assert all(isinstance(r, VerifierResult) for r in batch.results)
    assert (batch.num_timeouts, batch.num_errors, batch.num_unscorable) == (0, 0, 0)


def test_hanging_item_times_out_within_twice_its_limit_others_scored(pool):
    limit = 1.0
    items = ["a", "hang", "b", "spin", "a"]
    start = time.monotonic()
    batch = score_batch(misbehaving, items, ["a", "a", "b", "x", "x"], timeout=limit, pool=pool)
    elapsed = time.monotonic() - start
    assert [r.status for r in batch.results] == ["ok", "timeout", "ok", "timeout", "ok"]
    assert batch.scores == [1.0, None, 1.0, None, 0.0]
    assert batch.num_timeouts == 2
    # Two hung items on two workers run side by side: about one limit, bounded by twice it.
    assert elapsed < 2 * limit + 1.0


def test_crashing_and_raising_items_are_errors_not_zeros(pool):
    batch = score_batch(misbehaving, ["crash", "raise", "exit", "a", "none"], ["a"] * 5, timeout=5, pool=pool)
    statuses = [r.status for r in batch.results]
    assert statuses == ["error", "error", "error", "ok", "unscorable"]
    assert "exit code 7" in batch.results[0].info["reason"]
    assert "verifier bug" in batch.results[1].info["reason"]
    assert batch.num_errors == 3 and batch.num_unscorable == 1
    assert batch.results[3].info["seen"] == "a"


def test_pool_recovers_after_kills(pool):
    score_batch(misbehaving, ["hang"], ["a"], timeout=0.5, pool=pool)
    assert score_batch(echo_float, ["a"] * 10, ["a"] * 10, pool=pool).scores == [1.0] * 10


def test_fields_reach_the_verifier(pool):
    v = get_verifier("overlong", max_length=10, buffer=4)
    batch = score_batch(v, ["x", "y"], [None, None], [{"num_completion_tokens": 8}, {}], pool=pool)
    assert batch.scores[0] == pytest.approx(-(8 - 6) / 4)
    assert batch.results[1].status == "unscorable"


def test_length_mismatch_is_an_error(pool):
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        score_batch(echo_float, ["a", "b"], ["a"], pool=pool)


def test_run_with_timeout_in_a_thread(pool):
    """Works off the main thread too (where signal.alarm would not)."""
    import threading

    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", run_with_timeout(time.sleep, 30, timeout=0.5, pool=pool)))
    t.start()
    t.join(10)
    assert out["r"].status == "timeout"


def test_inline_pool_for_debugging():
    with WorkerPool(0) as inline:
        assert score_batch(echo_float, ["a"], ["a"], pool=inline).scores == [1.0]
