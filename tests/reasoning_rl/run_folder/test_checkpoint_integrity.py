"""Checkpoint manifests: a damaged checkpoint is found, named, and skipped on resume for the newest intact one."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reasoning_rl.errors import UserError
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.run_folder import checkpoint as ckpt
from reasoning_rl.settings.model import TinyModelConfig


def save(run_dir: Path, step: int) -> Path:
    model, tokenizer = build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2,
                                                        intermediate_size=32, init_seed=step))
    return ckpt.save_checkpoint(run_dir, step, model, tokenizer, {"marker": step},
                                prompting={"task": "arithmetic", "chat_template": False})


def flip_a_byte(path: Path, offset: int = -10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int = 100) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    for step in (2, 4, 6):
        save(run, step)
    return run


def test_manifest_lists_every_file_with_size_and_hash(run_dir: Path) -> None:
    folder = run_dir / "checkpoint-6"
    manifest = json.loads((folder / ckpt.MANIFEST_FILE).read_text())
    on_disk = sorted(p.name for p in folder.iterdir() if p.name != ckpt.MANIFEST_FILE)
    assert sorted(manifest["files"]) == on_disk
    assert {"model.safetensors", ckpt.STATE_FILE, ckpt.PROMPTING_FILE, "config.json"} <= set(on_disk)
    assert manifest["files"][ckpt.STATE_FILE]["bytes"] == (folder / ckpt.STATE_FILE).stat().st_size
    assert manifest["step"] == 6
    assert ckpt.checkpoint_problem(folder) is None


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda f: flip_a_byte(f / "model.safetensors"), "model.safetensors does not match its SHA-256"),
    (lambda f: truncate(f / ckpt.STATE_FILE), "trainer_state.pt has 100 bytes, the manifest says"),
    (lambda f: (f / "config.json").unlink(), "config.json is missing"),
    (lambda f: (f / ckpt.MANIFEST_FILE).write_text("{not json"), "manifest.json is unreadable"),
])
def test_damage_is_named(run_dir: Path, damage, expected: str) -> None:
    folder = run_dir / "checkpoint-6"
    damage(folder)
    assert expected in ckpt.checkpoint_problem(folder)
    with pytest.raises(ckpt.CheckpointError, match=f"{folder}.*is corrupt") as err:
        ckpt.check_checkpoint(folder)
    assert isinstance(err.value, UserError)


def test_resume_skips_corrupt_newest_checkpoints_and_says_so(run_dir: Path, caplog) -> None:
    flip_a_byte(run_dir / "checkpoint-6" / "model.safetensors")
    truncate(run_dir / "checkpoint-4" / ckpt.STATE_FILE)
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.run_folder.checkpoint"):
        chosen = ckpt.resume_checkpoint(run_dir)
    assert chosen == run_dir / "checkpoint-2"
    text = caplog.text
    assert "checkpoint-6 is corrupt (model.safetensors does not match" in text
    assert "checkpoint-4 is corrupt (trainer_state.pt has 100 bytes" in text
    assert "resuming from" in text and "checkpoint-2, the newest intact checkpoint, instead of the corrupt " \
        "checkpoint-6, checkpoint-4" in text


def test_resume_tidies_what_a_killed_checkpoint_write_left(run_dir: Path, caplog) -> None:
    """A SIGKILL mid-write leaves .checkpoint-8.tmp (unfinished: removed); a kill between the two
    renames that replace checkpoint-6 leaves only .checkpoint-6.old (complete: put back and used)."""
    (run_dir / ".checkpoint-8.tmp").mkdir()
    (run_dir / ".checkpoint-8.tmp" / "model.safetensors").write_bytes(b"half")
    (run_dir / "checkpoint-6").rename(run_dir / ".checkpoint-6.old")
    (run_dir / ".other.tmp").mkdir()  # not a checkpoint's: left alone
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.run_folder.checkpoint"):
        assert ckpt.resume_checkpoint(run_dir) == run_dir / "checkpoint-6"
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == [".other.tmp"]
    assert f"removed the unfinished write {run_dir / '.checkpoint-8.tmp'}" in caplog.text
    assert f"restored {run_dir / 'checkpoint-6'} from {run_dir / '.checkpoint-6.old'}" in caplog.text
    assert ckpt.checkpoint_problem(run_dir / "checkpoint-6") is None


def test_resume_with_no_intact_checkpoint_is_a_user_error(run_dir: Path) -> None:
    for step in (2, 4, 6):
        flip_a_byte(run_dir / f"checkpoint-{step}" / ckpt.STATE_FILE)
    with pytest.raises(ckpt.CheckpointError, match=r"no intact checkpoint to resume from.*checkpoint-6 .*checkpoint-2"):
        ckpt.resume_checkpoint(run_dir)


def test_resume_with_no_checkpoint_is_a_fresh_start(tmp_path: Path) -> None:
    assert ckpt.resume_checkpoint(tmp_path) is None


def test_legacy_checkpoint_without_manifest_is_used_with_a_warning(run_dir: Path, caplog) -> None:
    for step in (2, 4, 6):
        (run_dir / f"checkpoint-{step}" / ckpt.MANIFEST_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="reasoning_rl.run_folder.checkpoint"):
        assert ckpt.resume_checkpoint(run_dir) == run_dir / "checkpoint-6"
    assert "has no manifest.json (written by an older version)" in caplog.text
    # Structural checks still catch truncation: a cut safetensors file, a cut trainer_state.pt.
    truncate(run_dir / "checkpoint-6" / "model.safetensors", keep=4000)
    truncate(run_dir / "checkpoint-4" / ckpt.STATE_FILE, keep=4000)
    assert "model.safetensors is" in ckpt.checkpoint_problem(run_dir / "checkpoint-6")
    assert "trainer_state.pt is not a readable archive" in ckpt.checkpoint_problem(run_dir / "checkpoint-4")
    assert ckpt.resume_checkpoint(run_dir) == run_dir / "checkpoint-2"


def test_unreadable_trainer_state_names_the_checkpoint(run_dir: Path) -> None:
    folder = run_dir / "checkpoint-6"
    truncate(folder / ckpt.STATE_FILE, keep=4000)
    with pytest.raises(ckpt.CheckpointError, match=f"checkpoint '{folder}' is corrupt: trainer_state.pt cannot be read"):
        ckpt.load_trainer_state(folder)
    assert ckpt.load_trainer_state(run_dir / "checkpoint-4")["marker"] == 4


def test_resumed_training_falls_back_past_a_corrupt_checkpoint(tmp_path: Path, caplog) -> None:
    """The trainer resumes from checkpoint-2 when checkpoint-4 is damaged, and logs which."""
    from reasoning_rl.algo.grpo_config import GRPOConfig
    from reasoning_rl.config import TrainConfig
    from reasoning_rl.trainer import Trainer

    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    cfg.task.max_train_examples = 8
    cfg.evaluation.enabled = False
    cfg.algo.prompts_per_step, cfg.algo.group_size = 2, 2
    cfg.rollout.max_new_tokens, cfg.rollout.reward_workers = 2, 1
    cfg.trainer.steps, cfg.trainer.save_every = 4, 2
    cfg.trainer.progress_bar = cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    flip_a_byte(tmp_path / "run" / "checkpoint-4" / "model.safetensors")
    cfg.trainer.resume = True
    with caplog.at_level(logging.WARNING):
        trainer = Trainer(cfg, tmp_path / "run")
    try:
        assert trainer.resume_from == tmp_path / "run" / "checkpoint-2"
        trainer._setup_algorithm()
        assert trainer.step == 2
    finally:
        trainer.close()
    assert "checkpoint-4 is corrupt (model.safetensors does not match" in caplog.text


def test_eval_refuses_a_corrupt_or_missing_checkpoint_before_loading_it(run_dir: Path, tmp_path: Path) -> None:
    from benchmarks.config import EvalConfig
    from benchmarks.runner import run

    def evaluate(folder: Path) -> None:
        run(EvalConfig(benchmark="arithmetic", model_name_or_path=str(folder), limit=2, progress=False,
                       output_dir=str(tmp_path / "eval")))

    folder = run_dir / "checkpoint-6"
    flip_a_byte(folder / "model.safetensors")
    with pytest.raises(ckpt.CheckpointError, match=f"model folder '{folder}' is corrupt: model.safetensors"):
        evaluate(folder)
    with pytest.raises(ckpt.CheckpointNotFoundError, match=f"'{run_dir / 'checkpoint-8'}' does not exist") as err:
        evaluate(run_dir / "checkpoint-8")
    assert isinstance(err.value, UserError)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_eval_of_a_missing_or_corrupt_checkpoint_is_one_line(run_dir: Path, tmp_path: Path, damage: str) -> None:
    folder = run_dir / "checkpoint-6"
    if damage == "missing":
        shutil.rmtree(folder)
    else:
        flip_a_byte(folder / "model.safetensors")
    proc = subprocess.run(
        [sys.executable, "-c", "from benchmarks.cli import eval_main; eval_main()", "benchmark=arithmetic",
         f"model={folder}", "limit=2", "progress=false", f"output_dir={tmp_path / 'eval'}",
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reasoning-rl-eval: "), proc.stderr
    assert str(folder) in lines[0]
    assert ("does not exist" if damage == "missing" else "model.safetensors does not match") in lines[0]



def test_train_resume_with_every_checkpoint_corrupt_exits_2_naming_them(run_dir: Path) -> None:
    for step in (2, 4, 6):
        truncate(run_dir / f"checkpoint-{step}" / ckpt.STATE_FILE, keep=1000)
    proc = subprocess.run(
        [sys.executable, "-c", "from reasoning_rl.cli import train_main; train_main()", "trainer.resume=true",
         "trainer.progress_bar=false", "trainer.tensorboard=false", f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"reasoning-rl-train: no intact checkpoint to resume from in '{run_dir}': "
                           "checkpoint-6 (trainer_state.pt has 1000 bytes, the manifest says "), last
    assert "checkpoint-4 (" in last and "checkpoint-2 (" in last and "Traceback" not in proc.stderr
