"""``reasoning-rl-bench plan``: composes the training config as reasoning-rl-train does and prints the plan."""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks.bench import SUBCOMMANDS, main
from benchmarks.perf.plan import compose_train_config, run
from benchmarks.perf.results import RESULT_PREFIX
from reasoning_rl.config_checks import ConfigError
from tests.reasoning_rl.conftest import TINY_OVERRIDES


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


def test_measure_trains_a_model_folder_named_relative_to_the_caller(tiny_run, tmp_path, monkeypatch, capsys):
    """`--measure` with `model.name_or_path=my_model`: the measured run, in a fresh process, finds `./my_model`
    where the command was run (as the prediction in this process does)."""
    shutil.copytree(tiny_run / "checkpoint-5", tmp_path / "my_model")
    monkeypatch.chdir(tmp_path)
    code = main(["plan", "--no-results", *TINY_OVERRIDES, "trainer.steps=1", "trainer.save_every=0",
                 "evaluation.enabled=false", "model.name_or_path=my_model", "--measure", "kept"])
    out = capsys.readouterr().out
    record = json.loads(out.strip().splitlines()[-1].removeprefix(RESULT_PREFIX))
    measured = record["figures"]["measured"]["kept"]
    assert code == 0 and measured["peak_rss_bytes"] > 0 and measured["predicted_bytes"] > 0
    # the folder's model (hidden 32, 1 layer), not model=tiny's preset (1,062,656 parameters)
    assert 0 < record["figures"]["parameters"] < 1_062_656
