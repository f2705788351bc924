"""The algo settings' old flat keys: refused in one line naming the new key, recognised in a run folder
written before the rename, and rewritten mechanically in text (reasoning_rl.config_renames)."""

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.cli import to_train_config
from reasoning_rl.config_renames import RENAMED, renamed_key_message, rewrite_text, upgrade_saved_config
from reasoning_rl.run_folder.lock import prepare_run_folder
from reasoning_rl.run_folder.status import config_differences, write_status
from tests.reasoning_rl.conftest import TINY_OVERRIDES, compose_train


def _field(schema: type, dotted: str) -> dataclasses.Field | None:
    """The dataclass field at ``dotted`` (below ``algo.``) of ``schema``, None when there is none."""
    owner, found = schema, None
    for part in dotted.split(".")[1:]:
        fields = {f.name: f for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else {}
        if part not in fields:
            return None
        found = fields[part]
        owner = found.default_factory() if found.default_factory is not dataclasses.MISSING else found.default
    return found


def test_every_new_key_is_a_setting_and_no_old_key_is_a_plain_one():
    for old, new in RENAMED.items():
        assert _field(GRPOConfig, new) is not None, new
        kept = _field(GRPOConfig, old)  # only a group of the same name may keep the old key's name
        assert kept is None or dataclasses.is_dataclass(kept.default_factory()), old


def _flat(algo: dict) -> dict:
    """``algo`` as a config.yaml written before the rename holds it (the groups' keys back at the top)."""
    old_of = {new: old for old, new in RENAMED.items()}
    out = {}
    for key, value in algo.items():
        if isinstance(value, dict) and any(f"algo.{key}.{k}" in old_of for k in value):
            out.update({old_of[f"algo.{key}.{k}"][len("algo."):]: v for k, v in value.items()})
        else:
            out[key] = value
    return out


@pytest.mark.parametrize(("args", "old", "new"), [
    (["algo.beta=0"], "algo.beta", "algo.kl.beta"),
    (["+algo.eps_high=0.28"], "algo.eps_high", "algo.policy_loss.eps_high"),
    (["algo.correction=tis"], "algo.correction", "algo.correction.name"),  # now a group's name
    (["algo=ppo", "algo.correction_c=3"], "algo.correction_c", "algo.correction.c"),
])
def test_an_old_key_is_refused_in_one_line_naming_the_new_one(tmp_path, args, old, new):
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", *args, f"trainer.output_dir={tmp_path}/run"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"reasoning-rl-train: {renamed_key_message(old)}"]
    assert renamed_key_message(old).startswith(f"{old} was renamed: use {new} ")
    assert not (tmp_path / "run").exists()


def test_dpo_keeps_its_own_beta():
    cfg = to_train_config(compose_train(["algo=dpo", "algo.beta=0.2"]))
    assert cfg.algo.beta == 0.2


@pytest.mark.parametrize("algo", ["grpo", "dapo", "clip_cov", "ppo", "dpo", "sft"])
def test_a_run_folder_written_before_the_rename_has_the_same_settings(tmp_path, algo):
    cfg = compose_train([*TINY_OVERRIDES, f"algo={algo}"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    before = {**resolved, "algo": _flat(resolved["algo"])}
    train_cfg = to_train_config(cfg)
    assert config_differences(upgrade_saved_config(before, train_cfg.algo), resolved) == []
    # the run folder: a finished run with the same settings is recognised as this command's (skipped)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(before))
    write_status(run, "finished")
    assert prepare_run_folder(run, resolved, train_cfg) is True


def test_rewrite_text_moves_commands_and_docs_to_the_new_keys():
    text = "reasoning-rl-train algo.beta=0 algo.correction=tis algo.group_size=4 # algo.beta_x, reasoning_rl.algo.kl"
    assert rewrite_text(text) == ("reasoning-rl-train algo.kl.beta=0 algo.correction.name=tis algo.group_size=4 "
                                  "# algo.beta_x, reasoning_rl.algo.kl")
    assert rewrite_text("raise algo.beta. Set algo.correction.name=tis") == "raise algo.kl.beta. Set algo.correction.name=tis"
