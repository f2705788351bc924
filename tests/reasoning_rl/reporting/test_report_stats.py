"""The sweep report's statistics: bootstrap intervals, paired differences, collapse, on known numbers."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import yaml

from reasoning_rl.config_checks import ConfigError
from reasoning_rl.reporting import report
from reasoning_rl.reporting.stats import bootstrap_mean, collapse_reason, setting_stats


def test_bootstrap_of_one_value_and_of_equal_values_is_that_value():
    i = bootstrap_mean([0.5])
    assert (i.mean, i.low, i.high, i.n) == (0.5, 0.5, 0.5, 1)
    i = bootstrap_mean([1.0, 1.0, 1.0])
    assert (i.mean, i.low, i.high, i.n) == (1.0, 1.0, 1.0, 3)
    assert math.isnan(bootstrap_mean([]).mean) and bootstrap_mean([]).n == 0


def test_bootstrap_of_two_values_spans_both():
    # resample means of {0, 1}: 0 (p 1/4), 0.5 (1/2), 1 (1/4): the 2.5th and 97.5th percentiles are 0 and 1
    i = bootstrap_mean([0.0, 1.0])
    assert (i.mean, i.low, i.high) == (0.5, 0.0, 1.0)


def test_with_three_seeds_the_95_interval_is_their_range():
    # all three draws equal the smallest value with probability 1/27 = 3.7% > 2.5%: the lower end is the
    # minimum, and the upper the maximum by symmetry
    i = bootstrap_mean([0.2, 0.4, 0.9])
    assert i.mean == pytest.approx(0.5)
    assert (i.low, i.high) == pytest.approx((0.2, 0.9))
    assert bootstrap_mean([0.2, 0.4, 0.9]) == i  # seeded: the same every time


def test_a_wider_sample_narrows_inside_its_range():
    xs = [float(v) for v in range(20)]  # mean 9.5, standard error 5.92 / sqrt(20) = 1.32
    i = bootstrap_mean(xs)
    assert i.mean == 9.5
    assert 0 < i.low < 9.5 - 1.5 and 9.5 + 1.5 < i.high < 19
    assert i.low == pytest.approx(9.5 - 1.96 * 1.32, abs=0.5) and i.high == pytest.approx(9.5 + 1.96 * 1.32, abs=0.5)


@pytest.mark.parametrize(("losses", "before", "after", "first", "last", "expected"), [
    ([0.1, math.nan], 0.3, 0.3, 0.4, 0.4, "non-finite loss"),
    ([0.1, math.inf], None, None, None, None, "non-finite loss"),
    ([0.1], 0.30, 0.14, 0.4, 0.4, "held-out accuracy 14.0% < 0.5 x 30.0% before"),  # 0.14 < 0.15
    ([0.1], 0.30, 0.16, 0.4, 0.4, None),  # 0.16 >= 0.15: worse, not collapsed
    ([0.1], 0.30, 0.30, 0.40, 0.19, "training reward 0.190 < 0.5 x 0.400 at the start"),
    ([0.1], 0.30, 0.30, 0.40, 0.21, None),
    ([None], None, None, None, None, None),
])
def test_collapse_is_a_non_finite_loss_or_a_fall_below_half(losses, before, after, first, last, expected):
    assert collapse_reason(losses, before, after, first, last, fraction=0.5) == expected


def _rec(setting, seed, value, collapsed=False):
    return SimpleNamespace(setting=setting, seed=seed, greedy_after=value, collapsed=collapsed)


def test_paired_differences_use_the_same_seeds_and_collapsed_runs_stay_in():
    runs = [_rec("base", 0, 0.3), _rec("base", 1, 0.4), _rec("base", 2, 0.5),
            _rec("new", 0, 0.5), _rec("new", 1, 0.6), _rec("new", 2, 0.4, collapsed=True),
            _rec("short", 0, 0.35), _rec("short", 1, None)]  # seed 1 failed: missing; seed 2 never ran
    stats = {s.setting: s for s in setting_stats(runs, "greedy_after", baseline="base")}
    assert list(stats) == ["base", "new", "short"]  # the baseline first
    new = stats["new"]
    # new: mean (0.5 + 0.6 + 0.4) / 3 = 0.5 with the collapsed run kept; paired diffs 0.2, 0.2, -0.1
    assert (new.runs, new.collapsed, new.missing) == (3, 1, 0)
    assert new.value.mean == pytest.approx(0.5)
    assert new.paired.mean == pytest.approx(0.1)
    assert (new.paired.low, new.paired.high) == pytest.approx((-0.1, 0.2))
    short = stats["short"]
    assert (short.runs, short.missing, short.paired.n) == (2, 1, 1)
    assert short.paired.mean == pytest.approx(0.05)  # seed 0 only: 0.35 - 0.3
    assert stats["base"].paired is None


def test_an_unknown_baseline_lists_the_settings():
    with pytest.raises(ConfigError, match=r"'nope' is not in this sweep; its settings: \['a'\]"):
        setting_stats([_rec("a", 0, 0.1)], "greedy_after", baseline="nope")


def _run(run_dir, seed, before, after, rewards, mismatch=None):
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"trainer": {"seed": seed, "steps": len(rewards)}}))
    (run_dir / "status.json").write_text(json.dumps({"status": "finished", "wall_s": 1.0}))
    (run_dir / "summary.json").write_text(json.dumps({"memory": {}}))
    (run_dir / "eval_before.json").write_text(json.dumps({"greedy_accuracy": before}))
    (run_dir / "eval_after.json").write_text(json.dumps({"greedy_accuracy": after}))
    rows = [{"step": i + 1, "reward/mean": r, "loss/total": 0.1, **(mismatch or {})} for i, r in enumerate(rewards)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))


def test_the_report_prints_intervals_paired_differences_collapse_and_mismatch(tmp_path):
    for seed, (a, b) in enumerate([(0.50, 0.40), (0.60, 0.45), (0.55, 0.20)]):
        _run(tmp_path / "inject=none" / f"seed={seed}", seed, 0.3, a, [0.3, 0.5])
        # seed 2 of the injected setting collapses by its reward (0.1 < 0.5 x 0.3), not its accuracy (0.20 >= 0.15)
        _run(tmp_path / "inject=stale4" / f"seed={seed}", seed, 0.3, b, [0.3, 0.1 if seed == 2 else 0.4],
             mismatch={"mismatch/log_rho_abs_mean": 0.2, "mismatch/kl_k3": 0.1, "mismatch/ess_fraction": 0.6,
                       "mismatch/masked_token_fraction": 0.0, "mismatch/truncated_token_fraction": 0.05})
    assert report.main([str(tmp_path), "--baseline", "inject=none"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    stats_table = text.split("mean [95% CI]")[1].split("Sampler/trainer")[0]
    rows = {line.split(" | ")[0]: line for line in stats_table.splitlines() if line.startswith("| `")}
    # baseline: mean 55.0 in [50.0, 60.0] (3 seeds: their range); stale4: mean 35.0 in [20.0, 45.0]
    assert rows["| `inject=none`"] == "| `inject=none` | 3 | 0 | 0 | 55.0 [50.0, 60.0] | baseline |"
    # paired: 40-50, 45-60, 20-55 = -10, -15, -35: mean -20.0 in [-35.0, -10.0]
    assert rows["| `inject=stale4`"].startswith("| `inject=stale4` | 3 | 1 | 0 | 35.0 [20.0, 45.0] | "
                                                "-20.0 [-35.0, -10.0] (n=3) |")
    assert "| `inject=stale4` | 0.2000 | 0.1000 | 0.600 | 0.0% | 5.0% |" in text
    assert "(collapsed: training reward 0.100 < 0.5 x 0.300 at the start)" in text
    records = json.loads((tmp_path / "report" / "runs.json").read_text())
    assert sum(r["collapsed"] for r in records) == 1


def test_an_unknown_metric_is_refused_with_the_choices(tmp_path, capsys):
    _run(tmp_path / "a" / "seed=0", 0, 0.3, 0.4, [0.3])
    assert report.main([str(tmp_path), "--metric", "colour"]) == 2
    assert "--metric 'colour' is not a number of the report's runs; choose one of" in capsys.readouterr().err
