"""Each health rule fires on a metric stream crafted to show its failure, stays quiet on the healthy
version of the same stream, and clears when the failure ends."""

import math

import pytest
import torch

from reasoning_rl.health import RULE_NAMES, RULES, HealthMonitor, replay
from reasoning_rl.health.rules import TESTS, read_value
from reasoning_rl.settings.trainer import RULE_THRESHOLDS, HealthConfig
from tests.conftest import REPO_ROOT, assert_close_up_to_rounding


def _stream(key_values: dict[str, list[float]]) -> list[dict]:
    """Rows step 1..N, each with every key's value at that step."""
    n = len(next(iter(key_values.values())))
    return [{"step": i + 1, **{k: v[i] for k, v in key_values.items()}} for i in range(n)]


def _flat(value: float, n: int = 40) -> list[float]:
    return [value] * n


def _ramp(start: float, end: float, n: int = 40) -> list[float]:
    return [start + (end - start) * i / (n - 1) for i in range(n)]


# rule -> (a healthy stream, the stream that shows its failure); every value is what a run logs.
CRAFTED: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {
    "non_finite": ({"loss/total": _flat(0.1), "grad/norm": _flat(1.0)},
                   {"loss/total": _flat(0.1, 30) + [math.nan] * 10, "grad/norm": _flat(1.0)}),
    "truncation": ({"completion/truncated_fraction": _flat(0.05)},
                   {"completion/truncated_fraction": _flat(0.05, 20) + _flat(0.7, 20)}),
    "zero_variance": ({"groups/zero_std_fraction": _flat(0.3)},
                      {"groups/zero_std_fraction": _flat(0.3, 10) + _flat(1.0, 30)}),
    "reward_constant": ({"reward/std": _flat(0.4)}, {"reward/std": _flat(0.4, 10) + _flat(0.0, 30)}),
    "unscorable": ({"reward/unscorable_fraction": _flat(0.0)},
                   {"reward/unscorable_fraction": _flat(0.0, 20) + _flat(0.9, 20)}),
    "entropy_collapse": ({"entropy/mean": _ramp(0.8, 0.45)}, {"entropy/mean": _flat(0.8, 10) + _ramp(0.8, 0.01, 15) + _flat(0.01, 15)}),
    "entropy_explosion": ({"entropy/mean": _ramp(0.8, 1.2)}, {"entropy/mean": _flat(0.8, 10) + _ramp(0.8, 8.0, 30)}),
    "kl_runaway": ({"kl/mean": _ramp(0.0, 0.6)}, {"kl/mean": _ramp(0.0, 20.0)}),
    "mismatch_rising": ({"mismatch/kl_k3": _flat(1e-12)}, {"mismatch/kl_k3": _ramp(1e-12, 0.2)}),
    "clip_saturated": ({"clip/low_fraction": _flat(0.01), "clip/high_fraction": _flat(0.01)},
                       {"clip/low_fraction": _flat(0.3), "clip/high_fraction": _flat(0.4)}),
    "grad_spike": ({"grad/norm": _ramp(2.0, 12.0)}, {"grad/norm": [*_flat(2.0, 30), 80.0, *_flat(2.0, 9)]}),
    "length_runaway": ({"completion/length_mean": _ramp(3.0, 4.0)}, {"completion/length_mean": _ramp(3.0, 30.0)}),
    "tamper": ({"reward/tamper/exit_patch": _flat(0)}, {"reward/tamper/exit_patch": [*_flat(0, 30), 2, *_flat(0, 9)]}),
    "audit_disagreement": ({"audit/disagree_rate": _flat(0.02)},
                           {"audit/disagree_rate": _flat(0.02, 20) + _flat(0.3, 20)}),
}


def test_every_rule_has_a_crafted_stream_and_a_documented_section():
    assert set(CRAFTED) == set(RULE_NAMES)
    doc = (REPO_ROOT / "docs" / "health.md").read_text()
    for rule in RULES:
        assert f"### {rule.name}" in doc, f"docs/health.md has no section for {rule.name}"
        row = f"| [`{rule.name}`](#{rule.name}) | {', '.join(f'`{k}`' for k in rule.keys)} | {rule.test} | " \
              f"{rule.threshold:g} | {rule.window} |"
        assert row in doc, f"docs/health.md's table differs from RULES for {rule.name}: {row}"
        assert rule.advice[1:] in doc, f"docs/health.md's section of {rule.name} is not its advice"
        assert rule.test in TESTS and rule.advice and "\n" not in rule.advice


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_a_rule_fires_on_its_failure_and_not_on_the_healthy_stream(rule):
    healthy, failing = CRAFTED[rule]
    assert [e.rule for e in replay(_stream(healthy))] == []
    fired = [e for e in replay(_stream(failing)) if e.event == "fired"]
    assert [e.rule for e in fired] == [rule]


def test_a_rule_clears_when_its_failure_ends():
    stream = _stream({"completion/truncated_fraction": _flat(0.0, 10) + _flat(0.9, 10) + _flat(0.0, 20)})
    events = replay(stream)
    # Mean of the last 10 over 0.5: first at step 16 (6 of 10 at 0.9 = 0.54); back at or under it from step 25.
    assert [(e.rule, e.event, e.step) for e in events] == [("truncation", "fired", 16), ("truncation", "cleared", 25)]
    # 6 * 0.9 / 10 = 0.54, up to the rounding of a 10-term float64 sum.
    assert_close_up_to_rounding(events[0].value, 0.54, terms=10, dtype=torch.float64)


def test_replayed_metrics_read_null_as_non_finite_and_skip_steps_without_the_keys():
    rows = [{"step": 1, "loss/total": 0.2}, {"step": 2, "reward/mean": 0.5}, {"step": 3, "loss/total": None}]
    events = replay(rows)
    assert [(e.rule, e.step) for e in events] == [("non_finite", 3)]
    assert math.isnan(events[0].value)


def test_fp16_skipped_steps_are_not_non_finite():
    # Loss scaling skips a step whose gradients overflowed on purpose and counts it.
    rows = [{"step": 1, "grad/norm": 1.0, "precision/skipped_steps": 0.0},
            {"step": 2, "grad/norm": math.inf, "precision/skipped_steps": 1.0},
            {"step": 3, "grad/norm": 1.0, "precision/skipped_steps": 1.0},
            {"step": 4, "grad/norm": math.inf, "precision/skipped_steps": 1.0}]
    assert [(e.rule, e.step) for e in replay(rows)] == [("non_finite", 4)]


def test_thresholds_and_disabled_rules_come_from_the_config():
    stream = _stream({"completion/truncated_fraction": _flat(0.3)})
    assert replay(stream) == []
    lowered = HealthMonitor.from_config(HealthConfig(thresholds={**HealthConfig().thresholds, "truncation": 0.2}))
    assert [e.rule for e in replay(stream, lowered)] == ["truncation"]
    off = HealthMonitor.from_config(HealthConfig(thresholds={"truncation": 0.2}, disable=["truncation"]))
    assert replay(stream, off) == []


def test_unknown_rule_names_list_the_known_ones():
    problems = HealthConfig(stop_on=["non_finite", "nan"], disable=["kl"]).problems()
    assert problems[0].startswith("trainer.health.stop_on names unknown rules ['nan']; the rules are non_finite, ")
    assert problems[1].startswith("trainer.health.disable names unknown rules ['kl']")


def test_the_value_of_a_rule_sums_its_keys_and_globs():
    rule = next(r for r in RULES if r.name == "tamper")
    assert read_value(rule, {"reward/tamper/a": 1, "reward/tamper/b": 2, "reward/mean": 5}) == 3
    assert read_value(rule, {"reward/mean": 5}) is None


def test_every_rule_has_one_threshold_setting_and_every_setting_a_rule() -> None:
    """The thresholds are settings (``trainer.health.thresholds``, reasoning_rl.settings.trainer); the rules read
    them, so the two tables name the same rules in the same order."""
    assert tuple(RULE_THRESHOLDS) == RULE_NAMES
    assert all(r.threshold == RULE_THRESHOLDS[r.name] for r in RULES)
