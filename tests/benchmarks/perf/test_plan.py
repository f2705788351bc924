"""``reasoning-rl-bench plan``: composes the training config as reasoning-rl-train does and prints the plan."""

from __future__ import annotations

import pytest

from benchmarks.bench import SUBCOMMANDS
from benchmarks.perf.plan import compose_train_config, run
from reasoning_rl.config_checks import ConfigError


def test_plan_is_a_bench_subcommand():
    assert SUBCOMMANDS["plan"] == "benchmarks.perf.plan"


def test_the_default_run_is_planned_by_component(capsys):
    result = run(["--device-gb", "1", "algo.micro_batch_size=16"])
    out = capsys.readouterr().out
    assert "| weights |" in out and "| optimiser states |" in out and "activations (16 rows)" in out
    assert "memory plan: peak" in out and "of 1.0 GB device (--device-gb 1): fits" in out
    figures = result.figures
    assert figures["micro_batch_rows"] == 16 and figures["fits"] and figures["parameters"] == 1_062_656
    assert figures["largest_micro_batch"] >= 16


def test_overrides_compose_and_are_validated_like_training():
    cfg = compose_train_config(["algo.group_size=4", "model.gradient_checkpointing=true"])
    assert cfg.algo.group_size == 4 and cfg.model.gradient_checkpointing
    with pytest.raises(ConfigError, match=r"trainer\.save_every"):
        compose_train_config(["trainer.save_every=-5"])


def test_an_unknown_option_is_refused(capsys):
    with pytest.raises(SystemExit):
        run(["--device", "80"])
    assert "unknown option(s) --device" in capsys.readouterr().err
