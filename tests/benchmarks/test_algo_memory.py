"""The GRPO-vs-PPO memory benchmark: equal completions per step, configs that compose, ratios."""

import pytest
from hydra import compose, initialize_config_module

from benchmarks.perf.algo_memory import SIZES, format_table, overrides_for
from reasoning_rl.cli import to_train_config


def _cfg(algo):
    ovr = overrides_for(algo, SIZES["100m"], completions=16, group_size=8, steps=2, max_new_tokens=16,
                        device="cpu", threads=1)
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        return to_train_config(compose(config_name="train", overrides=ovr))


def test_every_algorithm_samples_the_same_completions_per_step_on_the_same_model():
    cfgs = {a: _cfg(a) for a in ("grpo", "ppo", "ppo_value_head")}
    for name, cfg in cfgs.items():
        assert cfg.algo.prompts_per_step * cfg.algo.group_size == 16, name
        assert cfg.model.tiny.hidden_size == 768 and cfg.model.tiny.num_layers == 12
        assert cfg.algo.kl.beta == 0.04 and not cfg.warmstart.enabled and not cfg.evaluation.enabled
    assert cfgs["grpo"].algo.group_size == 8 and cfgs["ppo"].algo.group_size == 1
    assert cfgs["ppo"].algo.critic == "separate" and cfgs["ppo_value_head"].algo.critic == "value_head"


def test_bad_choices_are_refused_with_the_reason():
    with pytest.raises(SystemExit, match="not a multiple"):
        overrides_for("grpo", SIZES["tiny"], 10, 4, 1, 4, "cpu", 1)
    with pytest.raises(SystemExit, match="unknown algorithm"):
        overrides_for("sft", SIZES["tiny"], 8, 4, 1, 4, "cpu", 1)


def test_the_table_gives_each_run_as_a_ratio_of_ppo():
    runs = {"grpo": {"parameters_gb": 1.0, "state_gb": 2.0, "peak_rss_gb": 3.0, "s_per_step": 1.0},
            "ppo": {"parameters_gb": 1.5, "state_gb": 4.0, "peak_rss_gb": 4.0, "s_per_step": 2.0}}
    table = format_table(runs, "ppo")
    assert "| grpo | 1.000 | 2.000 | 3.000 | 1.00 |" in table
    assert "grpo / ppo: params 0.67, state 0.50, peak RSS 0.75" in table
