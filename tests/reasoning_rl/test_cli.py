"""The Hydra app: every shipped config composes, overrides are typed, --multirun sweeps."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from reasoning_rl.cli import to_train_config
from reasoning_rl.config import TrainConfig
from reasoning_rl.validation import validate
from tests.reasoning_rl.conftest import compose_train

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in ("task", "model", "algo", "rollout")}


@pytest.mark.parametrize("group, name", [(g, n) for g, names in GROUPS.items() for n in names])
def test_every_shipped_config_composes_and_validates(group, name):
    cfg = to_train_config(compose_train([f"{group}={name}"]))
    assert isinstance(cfg, TrainConfig)
    validate(cfg)


def test_variant_presets():
    dapo = to_train_config(compose_train(["algo=dapo"])).algo
    assert (dapo.kl.beta, dapo.policy_loss.eps_high, dapo.loss_aggregation) == (0.0, 0.28, "token_mean")
    dr = to_train_config(compose_train(["algo=dr_grpo"])).algo
    assert (dr.advantage.estimator, dr.loss_aggregation) == ("dr_grpo", "constant")


def test_default_run_recipe_applies_to_its_combination_only():
    """The recipe's values (read from its file, not pinned here) apply to grpo + arithmetic + tiny only."""
    import yaml

    recipe = yaml.safe_load((CONF / "recipe" / "grpo_arithmetic_tiny.yaml").read_text())
    def dotted(values, prefix=""):  # {"algo": {"kl": {"beta": 0.01}}} -> {"algo.kl.beta": 0.01}
        out = {}
        for key, value in values.items():
            out.update(dotted(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return out

    tuned = dotted(recipe)

    def settings(cfg):
        return {name: functools.reduce(getattr, name.split("."), cfg) for name in tuned}

    default = to_train_config(compose_train([]))
    assert (default.algo.name, default.task.name, default.model.name_or_path) == ("grpo", "arithmetic", "tiny")
    assert settings(default) == tuned
    assert default.algo.kl.beta > 0  # the paper's structure: KL to the reference stays
    # `~recipe` drops it: the schema's and presets' values come back, and they differ from the recipe's.
    bare = settings(to_train_config(compose_train(["~recipe"])))
    assert all(bare[name] != value for name, value in tuned.items())
    # Another algorithm, task or model on the same defaults: the recipe is left out.
    assert settings(to_train_config(compose_train(["algo=dapo"]))) != tuned
    qwen = settings(to_train_config(compose_train(["model=qwen2.5-0.5b-instruct"])))
    assert qwen == bare
    # The command line beats the recipe.
    assert to_train_config(compose_train(["algo.kl.beta=0.0", "trainer.steps=5"])).algo.kl.beta == 0.0


def test_typo_in_override_names_the_key():
    with pytest.raises(Exception, match="group_sise"):
        compose_train(["algo.group_sise=4"])


def test_wrong_type_is_rejected():
    with pytest.raises(Exception, match="group_size"):
        compose_train(["algo.group_size=many"])


TINY = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.num_heads=2", "model.tiny.intermediate_size=64",
    "task.max_train_examples=32", "task.max_eval_examples=4", "algo.prompts_per_step=2", "rollout.max_new_tokens=3",
    "warmstart.enabled=false", "evaluation.num_examples=4", "evaluation.samples_per_problem=1",
    "trainer.steps=1", "trainer.progress_bar=false", "trainer.tensorboard=false", "trainer.num_threads=1",
    "rollout.reward_workers=1",
]


@pytest.mark.slow
def test_multirun_sweeps_beta_and_group_size(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "--multirun", "algo.kl.beta=0,0.04", "algo.group_size=2,4",
         f"hydra.sweep.dir={tmp_path}", *TINY],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(p.parent for p in tmp_path.glob("*/seed=*/config.yaml"))  # <overrides>/seed=<seed>/
    assert len(runs) == 4
    seen = set()
    for run in runs:
        cfg = OmegaConf.load(run / "config.yaml")
        seen.add((cfg.algo.kl.beta, cfg.algo.group_size))
        assert (run / "checkpoint-1" / "config.json").exists()
        assert (run / "reference").exists() == (cfg.algo.kl.beta > 0)
        assert json.loads((run / "summary.json").read_text())["eval_after"]
    assert seen == {(0.0, 2), (0.0, 4), (0.04, 2), (0.04, 4)}


@pytest.mark.parametrize(("override", "expected"), [
    ("algo.group_size=1", "algo.group_size must be >= 2"),
    ("algo.name=nope", "Known algorithms: dpo, grpo, ppo, rft, sft"),
    ("task.name=gsm9k", "Did you mean 'gsm8k'"),
])
def test_bad_input_is_one_clear_message_not_a_traceback(tmp_path, override, expected):
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", override, f"trainer.output_dir={tmp_path}/run"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 2
    assert expected in out.stderr and "Traceback" not in out.stderr
