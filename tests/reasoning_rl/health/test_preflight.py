"""Preflight: step 1's batch, read before any update, warns about truncation, zero-variance groups,
unscorable answers and prompts too long for the context; and leaves training exactly as without it."""

import json

from reasoning_rl.health.preflight import preflight_warnings
from reasoning_rl.run_folder.metrics_log import read_metrics
from tests.reasoning_rl.conftest import PROCESS_DIAGNOSTICS, _train, tiny_config


def test_each_check_warns_past_its_threshold_with_the_setting_to_change():
    healthy = {"completion/truncated_fraction": 0.1, "groups/zero_std_fraction": 0.5,
               "reward/unscorable_fraction": 0.0, "prompt/length_max": 100}
    assert preflight_warnings(healthy, max_new_tokens=256, context=2048) == []
    bad = {"completion/truncated_fraction": 0.8, "groups/zero_std_fraction": 1.0,
           "reward/unscorable_fraction": 0.75, "prompt/length_max": 1900}
    rows = preflight_warnings(bad, max_new_tokens=256, context=2048)
    assert [r["rule"] for r in rows] == ["truncation", "zero_variance", "unscorable", "prompt_length"]
    assert "raise rollout.max_new_tokens" in rows[0]["advice"]
    assert rows[3]["advice"].startswith("the longest first-batch prompt has 1900 tokens; with "
                                        "rollout.max_new_tokens=256 it passes the model's context of 2048")


def test_a_run_warns_before_its_first_update_and_trains_exactly_as_without_the_preflight(tmp_path, caplog):
    # tiny_config's 4-token completions from an untrained policy are nearly all cut at the limit.
    cfg = tiny_config(steps=2)
    cfg.evaluation.enabled = False
    _train(cfg, tmp_path / "with")
    rows = [json.loads(line) for line in (tmp_path / "with" / "health.jsonl").read_text().splitlines()]
    assert [(r["step"], r["rule"], r["event"]) for r in rows][:1] == [(0, "truncation", "preflight")]
    assert any(r.getMessage().startswith("health preflight: truncation: the first batch has "
                                         "completion/truncated_fraction=") for r in caplog.records)
    cfg.trainer.health.preflight = False
    _train(cfg, tmp_path / "without")
    assert not (tmp_path / "without" / "health.jsonl").read_text().strip()

    def training_values(run):
        return [{k: v for k, v in m.items() if not k.startswith(PROCESS_DIAGNOSTICS)}
                for m in read_metrics(tmp_path / run / "metrics.jsonl")]

    assert training_values("with") == training_values("without")  # bit for bit
