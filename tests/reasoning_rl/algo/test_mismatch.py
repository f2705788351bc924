"""Mismatch metrics on hand-worked log-probs: |log rho|, k3, ESS, masked fractions, buckets, staleness."""

import math
from types import SimpleNamespace

import pytest
import torch

from reasoning_rl.algo.corrections import CorrectionConfig, apply_correction
from reasoning_rl.algo.loss_tokens import loss_tokens
from reasoning_rl.algo.mismatch import (
    BUCKET_KEYS,
    MismatchStats,
    behaviour_rows,
    ess_fraction,
    staleness_metrics,
)
from tests.conftest import assert_close_up_to_rounding

pytestmark = pytest.mark.numerics

LN2 = math.log(2)


def test_bucket_keys_name_the_probability_ranges_in_percent():
    assert BUCKET_KEYS == ("mismatch/rho_mean_p00-01", "mismatch/rho_mean_p01-10", "mismatch/rho_mean_p10-50",
                           "mismatch/rho_mean_p50-90", "mismatch/rho_mean_p90-100")


def test_ess_of_known_weights():
    assert ess_fraction([0.0, 0.0, 0.0, 0.0]) == pytest.approx(1.0)  # equal weights: ESS = N
    assert ess_fraction([math.log(1.0), math.log(3.0)]) == pytest.approx(16 / 20)  # (1+3)^2 / (2 (1+9))
    assert ess_fraction([0.0, -50.0, -50.0, -50.0]) == pytest.approx(0.25)  # one weight dominates: 1/N
    assert ess_fraction([800.0, 800.0]) == pytest.approx(1.0)  # no overflow: shifted by the largest
    assert math.isnan(ess_fraction([]))


def test_token_and_sequence_metrics_of_one_batch():
    # pi_train = 0.5 on every token; mu = 0.25, 1.0 (row 0), 0.625, padding (row 1)
    # log rho = ln 2, -ln 2 (row 0); ln 0.8 (row 1)
    # |log rho| mean over 3 tokens = (2 ln 2 + 0.22314) / 3; max ln 2
    # k3 = rho - 1 - ln rho: rho 2 -> 0.30685; rho 0.5 -> 0.19315; rho 0.8 -> 0.02314; mean (0.5 + 0.02314) / 3
    # sequence weights: 2 * 0.5 = 1 and 0.8 -> ESS/N = 1.8^2 / (2 * 1.64) = 0.98780
    train = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    mu = torch.log(torch.tensor([[0.25, 1.0], [0.625, 0.01]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    x = loss_tokens(train, train, torch.ones(2, 1), mask, mu)
    c = apply_correction(CorrectionConfig("mis_token", low=0.6, high=1.5), x)  # masks rho 2 and 0.5: row 0 whole
    stats = MismatchStats()
    stats.add(train, mu, mask, c)
    m = stats.metrics()
    ln08 = -math.log(0.8)
    assert m["mismatch/log_rho_abs_mean"] == pytest.approx((2 * LN2 + ln08) / 3)
    assert m["mismatch/log_rho_abs_max"] == pytest.approx(LN2)
    # k3 = rho - log rho - 1 cancels: its rounding is that of rho (2 at most), over 3 tokens of 3 terms each.
    assert_close_up_to_rounding(m["mismatch/kl_k3"], (0.5 + (ln08 - 0.2)) / 3, terms=3 * 3, scale=2.0)
    assert m["mismatch/ess_fraction"] == pytest.approx(1.8 ** 2 / (2 * 1.64))
    assert m["mismatch/masked_token_fraction"] == pytest.approx(2 / 3)
    assert m["mismatch/truncated_token_fraction"] == 0.0
    assert m["mismatch/masked_sequence_fraction"] == pytest.approx(1 / 2)
    # buckets of mu: 0.25 -> [10%, 50%) with rho 2; 0.625 -> [50%, 90%) with rho 0.8; 1.0 -> [90%, 100%]
    assert m["mismatch/rho_mean_p10-50"] == pytest.approx(2.0)
    assert m["mismatch/rho_mean_p50-90"] == pytest.approx(0.8)
    assert m["mismatch/rho_mean_p90-100"] == pytest.approx(0.5)
    assert math.isnan(m["mismatch/rho_mean_p00-01"])  # the padded 0.01 is not counted


def test_sums_over_micro_batches_equal_the_whole_batch():
    train = torch.log(torch.tensor([[0.5, 0.4], [0.3, 0.9], [0.2, 0.2]]))
    mu = torch.log(torch.tensor([[0.25, 0.5], [0.6, 0.9], [0.1, 0.05]]))
    mask = torch.ones(3, 2)
    whole, parts = MismatchStats(), MismatchStats()
    whole.add(train, mu, mask)
    parts.add(train[:1], mu[:1], mask[:1])
    parts.add(train[1:], mu[1:], mask[1:])
    a, b = whole.metrics(), parts.metrics()
    for key in a:
        assert a[key] == pytest.approx(b[key], nan_ok=True), key
    # ESS of the sequences' weights prod rho: 2 * 0.8 = 1.6, 0.5 * 1 = 0.5, 2 * 4 = 8
    w = [1.6, 0.5, 8.0]
    assert a["mismatch/ess_fraction"] == pytest.approx(sum(w) ** 2 / (3 * sum(x * x for x in w)))


def test_unknown_behaviour_is_left_out_and_no_known_token_gives_no_metrics():
    train = torch.log(torch.tensor([[0.5, 0.5]]))
    stats = MismatchStats()
    stats.add(train, torch.tensor([[math.nan, math.log(0.25)]]), torch.ones(1, 2))
    assert stats.metrics()["mismatch/log_rho_abs_mean"] == pytest.approx(LN2)  # one known token
    empty = MismatchStats()
    empty.add(train, torch.full((1, 2), math.nan), torch.ones(1, 2))
    assert empty.metrics() == {}


def test_behaviour_rows_from_completions():
    done = SimpleNamespace(logprobs=[-0.1, -0.2])
    none = SimpleNamespace(logprobs=None)
    empty = SimpleNamespace(logprobs=[])  # an empty completion, trained as its EOS
    rows = behaviour_rows([done, none, empty], [[5, 6], [7], [2]])
    assert rows[0].tolist() == pytest.approx([-0.1, -0.2])
    assert math.isnan(rows[1][0]) and math.isnan(rows[2][0])
    assert behaviour_rows([none, none], [[1], [2]]) is None


def test_staleness_counts_versions_behind():
    assert staleness_metrics([3, 1, None], current=4) == {"mismatch/staleness_mean": 2.0,
                                                          "mismatch/staleness_max": 3.0}
    assert staleness_metrics([None], current=4) == {}
