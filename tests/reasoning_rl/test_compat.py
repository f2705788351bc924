"""The compatibility rules (reasoning_rl.compat): each one refuses its combination and nothing else, every
refusal of the code base comes from the table, and docs/compatibility.md is made from it."""

import re
from pathlib import Path

import pytest

from reasoning_rl import compat
from reasoning_rl.algo.dpo import DPOConfig
from reasoning_rl.algo.ppo import PPOConfig
from reasoning_rl.algo.sft import SFTConfig
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.validation import validate
from tests.reasoning_rl.conftest import tiny_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def _set(**changes):
    """A change of the tiny config by dotted key (``trainer.fsdp``)."""
    def apply(cfg):
        for dotted, value in changes.items():
            *path, name = dotted.split(".")
            owner = cfg
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, name, value)
    return apply


def _algo(config):
    return lambda cfg: setattr(cfg, "algo", config)


def _both(*changes):
    return lambda cfg: [change(cfg) for change in changes]


FSDP, ASYNC, LORA = _set(**{"trainer.fsdp": True}), _set(**{"rollout.max_staleness": 1}), _set(**{"model.lora.r": 4})
INJECT = _set(**{"rollout.inject.stale": 1})
CASES = {  # (first, second) of each rule -> a change of the tiny config that triggers it, and the process count
    ("trainer.fsdp=true", "an algorithm without fsdp"): (_both(FSDP, _algo(PPOConfig())), 1),
    ("trainer.fsdp=true", "algo.dynamic_sampling.enabled=true"): (_both(FSDP, _set(**{"algo.dynamic_sampling.enabled": True})), 1),
    ("trainer.fsdp=true", "algo.skip_zero_advantage_groups=true"):
        (_both(FSDP, _set(**{"algo.kl.beta": 0.0, "algo.skip_zero_advantage_groups": True})), 1),
    ("trainer.fsdp=true", "algo.kl.ref_reset_every > 0"): (_both(FSDP, _set(**{"algo.kl.ref_reset_every": 2})), 1),
    ("trainer.fsdp=true", "rollout.backend=vllm"): (_both(FSDP, _set(**{"rollout.backend": "vllm"})), 1),
    ("rollout.inject", "trainer.fsdp=true"): (_both(FSDP, INJECT), 1),
    ("rollout.max_staleness", "rollout.backend=vllm"): (_both(ASYNC, _set(**{"rollout.backend": "vllm"})), 1),
    ("rollout.max_staleness", "trainer.fsdp=true"): (_both(ASYNC, FSDP), 1),
    ("rollout.max_staleness", "several processes (torchrun)"): (ASYNC, 2),
    ("rollout.max_staleness", "rollout.inject"): (_both(ASYNC, INJECT), 1),
    ("rollout.max_staleness", "an algorithm without async_rollouts"): (_both(ASYNC, _algo(DPOConfig())), 1),
    ("rollout.max_staleness", "algo.dynamic_sampling.enabled=true"):
        (_both(ASYNC, _set(**{"algo.dynamic_sampling.enabled": True})), 1),
    ("rollout.max_staleness", "model.lora.r > 0"): (_both(ASYNC, LORA), 1),
    ("rollout.max_staleness", "task.env"): (_both(ASYNC, _set(**{"task.env": "python_tool"})), 1),
    ("model.lora.r > 0", "an algorithm without lora"): (_both(LORA, _algo(SFTConfig())), 1),
    ("model.lora.r > 0", "trainer.fsdp=true"): (_both(LORA, FSDP), 1),
    ("model.lora.r > 0", "algo.kl.ref_reset_every > 0"): (_both(LORA, _set(**{"algo.kl.ref_reset_every": 2})), 1),
    ("trainer.precision=bf16/fp16", "model.dtype other than float32"):
        (_set(**{"trainer.precision": "bf16", "model.dtype": "bfloat16"}), 1),
    ("trainer.precision=bf16/fp16", "an algorithm without mixed_precision"):
        (_both(_set(**{"trainer.precision": "bf16"}), _algo(PPOConfig())), 1),
}


def test_every_rule_has_a_case():
    assert sorted((r.first, r.second) for r in compat.RULES) == sorted(CASES)


@pytest.mark.parametrize("rule", compat.RULES, ids=lambda r: f"{r.first} + {r.second}")
def test_each_rule_refuses_its_combination(rule):
    change, processes = CASES[(rule.first, rule.second)]
    cfg = tiny_config()
    assert compat.problems(cfg, processes) == []  # the default run combines nothing refused
    change(cfg)
    found = compat.problems(cfg, processes)
    assert rule.message(cfg) in found
    with pytest.raises(ConfigError, match=re.escape(rule.message(cfg)[:60])):
        compat.refuse(cfg, processes)


def test_validate_raises_the_rules_refusals():
    cfg = tiny_config()
    _both(FSDP, _set(**{"rollout.backend": "vllm"}))(cfg)
    with pytest.raises(ConfigError, match=r"rollout.backend=vllm is not supported") as err:
        validate(cfg)
    assert str(err.value).count("trainer.fsdp=true with rollout.backend=vllm") == 1


def test_every_refusal_comes_from_the_table():
    phrases = re.compile(r"is not supported|does not support|is not built into")
    holders = {str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "reasoning_rl").rglob("*.py")
               if phrases.search(p.read_text())}
    assert holders == {"reasoning_rl/compat.py"}


def test_the_docs_table_is_made_from_the_rules():
    assert (REPO_ROOT / "docs" / "compatibility.md").read_text() == compat.markdown(), (
        "regenerate it: python -m reasoning_rl.compat > docs/compatibility.md")
