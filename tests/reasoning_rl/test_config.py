"""Config truth in one place: schema defaults equal the YAML, cross-group writes are declared,
and a recipe is composed for exactly the combination its name states."""

import dataclasses
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from reasoning_rl.algo.grpo import GRPOConfig
from reasoning_rl.algo.ppo import PPOConfig
from reasoning_rl.cli import to_train_config
from reasoning_rl.settings.evaluation import EvalConfig, WarmStartConfig
from reasoning_rl.settings.rollout import RolloutConfig
from reasoning_rl.settings.trainer import TrainerConfig

CONF = Path(__file__).resolve().parents[2] / "conf"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _defaults(schema) -> dict:
    """The schema's defaults, a group's (a nested dataclass) as the plain dict its YAML block holds."""
    out = {}
    for f in dataclasses.fields(schema):
        value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out


@pytest.mark.parametrize(("path", "key", "schema"), [
    ("train.yaml", "trainer", TrainerConfig), ("train.yaml", "warmstart", WarmStartConfig),
    ("train.yaml", "evaluation", EvalConfig), ("rollout/hf.yaml", None, RolloutConfig),
    ("algo/grpo.yaml", None, GRPOConfig), ("algo/ppo.yaml", None, PPOConfig),
])
def test_schema_defaults_equal_the_default_yaml(path, key, schema):
    values = _load(CONF / path)
    values = values[key] if key else {k: v for k, v in values.items() if k != "defaults"}
    defaults = _defaults(schema)
    unknown = set(values) - set(defaults)
    assert not unknown, f"{path}: keys {unknown} are not in {schema.__name__}"
    differ = {k: (v, defaults[k]) for k, v in values.items() if v != defaults[k]}
    assert not differ, f"{path} (yaml, schema default): {differ}"


def _leaves(node: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        out += _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return out


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


GLOBAL_FILES = [p for p in sorted(CONF.glob("*/*.yaml"))
                if p.read_text().startswith("# @package _global_") and p.parent.name != "experiment"]
"""Group files that write into other groups; experiment presets are whole-run settings by design."""


@pytest.mark.parametrize("path", GLOBAL_FILES, ids=[str(p.relative_to(CONF)) for p in GLOBAL_FILES])
def test_a_file_that_writes_into_other_groups_says_so_at_its_top(path):
    group = path.parent.name
    header = _header(path)
    outside = [leaf for key, node in _load(path).items() if key not in (group, "defaults")
               for leaf in (_leaves(node, f"{key}.") if isinstance(node, dict) else [key])]
    missing = [leaf for leaf in outside if leaf not in header]
    assert not missing, f"{path.relative_to(CONF)} writes {missing} outside {group}/ without naming them at its top"


RECIPES = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_is_composed_for_the_combination_it_names(name):
    options = {g: sorted(p.stem for p in (CONF / g).glob("*.yaml")) for g in ("algo", "task", "model")}
    combos = [(a, t, m) for a in options["algo"] for t in options["task"] for m in options["model"]
              if f"{a}_{t}_{m}" == name]
    assert len(combos) == 1, f"recipe/{name}.yaml names no existing algo_task_model combination: it would never apply"
    algo, task, model = combos[0]
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=[f"algo={algo}", f"task={task}", f"model={model}"],
                      return_hydra_config=True)
    assert cfg.hydra.runtime.choices.get("recipe") == name
    recipe = _load(CONF / "recipe" / f"{name}.yaml")
    for leaf in _leaves(recipe):
        group, _, key = leaf.partition(".")
        value = cfg[group]
        for part in key.split("."):
            value = value[part]
        want = recipe[group]
        for part in key.split("."):
            want = want[part]
        if isinstance(want, list):  # e.g. task.rewards: each listed item's keys, in order, over the schema's defaults
            got = OmegaConf.to_container(value)
            assert len(got) == len(want) and all({k: g[k] for k in w} == w for g, w in zip(got, want)), (leaf, got)
            continue
        assert value == pytest.approx(want) if isinstance(value, float) else value == want


def test_the_default_run_composes_its_recipe():
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", return_hydra_config=True)
    assert cfg.hydra.runtime.choices.get("recipe") == "grpo_arithmetic_tiny"


def test_unknown_algorithm_name_lists_the_known_ones():
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=["algo.name=ppo_not_yet"])
    with pytest.raises(KeyError, match=r"Known algorithms: .*grpo"):
        to_train_config(cfg)


def test_an_unknown_policy_runtime_is_refused_before_the_run_starts():
    from reasoning_rl.config_checks import ConfigError
    from reasoning_rl.validation import validate

    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=["model.runtime=fast"])
    with pytest.raises(ConfigError, match=r"model.runtime='fast' is unknown; choose one of auto, hf, lean"):
        validate(to_train_config(cfg))
