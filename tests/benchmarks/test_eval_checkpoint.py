"""Evaluating a run's own checkpoint prompts it as training did (``prompting.json``) and reproduces the
run's held-out greedy accuracy; explicit eval settings win; a plain model folder keeps the old default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.config import EvalConfig
from benchmarks.runner import run
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder.checkpoint import PROMPTING_FILE
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.trainer import Trainer

EVAL_PROBLEMS = 8
MAX_NEW_TOKENS = 4


def short_run_config() -> TrainConfig:
    """Two GRPO steps of a tiny model on arithmetic, trained on a raw prompt with its own template
    (the tokenizer does have a chat template, which training does not use)."""
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.system_prompt = "Compute."
    cfg.task.max_train_examples = 16
    cfg.task.max_eval_examples = EVAL_PROBLEMS
    cfg.algo.prompts_per_step = 2
    cfg.algo.group_size = 2
    cfg.rollout.max_new_tokens = MAX_NEW_TOKENS
    cfg.rollout.reward_workers = 1
    cfg.trainer.steps = 2
    cfg.trainer.save_every = 0
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    cfg.evaluation.num_examples = EVAL_PROBLEMS
    cfg.evaluation.samples_per_problem = 1
    return cfg


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The run folder, its summary, and the held-out prompts and greedy completions of its final policy."""
    run_dir = tmp_path_factory.mktemp("run")
    trainer = Trainer(short_run_config(), run_dir)
    try:
        summary = trainer.train()
        greedy = SamplingConfig(max_new_tokens=MAX_NEW_TOKENS, do_sample=False, stop=trainer.sampling.stop)
        prompts = [e.prompt for e in trainer.eval_examples]
        completions = [g[0].text for g in trainer.engine.generate(prompts, 1, greedy, seed=0)]
    finally:
        trainer.close()
    return {"dir": run_dir, "summary": summary, "prompts": prompts, "completions": completions}


class Recorder:
    """Wraps the eval engine and keeps the prompts it is given."""

    def __init__(self, engine) -> None:
        self.engine, self.prompts = engine, []

    def generate(self, prompts, n, sampling, seed=None):
        self.prompts.extend(prompts)
        return self.engine.generate(prompts, n, sampling, seed=seed)


@pytest.fixture
def recorded(monkeypatch) -> list[Recorder]:
    import benchmarks.generation as generation

    made: list[Recorder] = []
    load = generation.load_engine

    def recording_load(*args, **kwargs):
        engine, tokenizer = load(*args, **kwargs)
        made.append(Recorder(engine))
        return made[-1], tokenizer

    monkeypatch.setattr(generation, "load_engine", recording_load)
    return made


def eval_config(tmp_path: Path, **kw) -> EvalConfig:
    kw.setdefault("benchmark", "arithmetic")
    kw.setdefault("score_workers", 1)
    kw.setdefault("limit", EVAL_PROBLEMS)
    kw.setdefault("max_new_tokens", MAX_NEW_TOKENS)
    kw.setdefault("backend", "hf")
    return EvalConfig(output_dir=str(tmp_path / "eval"), progress=False, device="cpu", **kw)


def test_checkpoint_records_how_training_prompted(short_run) -> None:
    prompting = json.loads((short_run["dir"] / "checkpoint-2" / PROMPTING_FILE).read_text())
    assert prompting["chat_template"] is False
    assert prompting["system_prompt"] == "Compute."
    assert prompting["prompt_template"] == "{question} Answer: "
    assert prompting["task"] == "arithmetic"
    assert prompting["max_new_tokens"] == MAX_NEW_TOKENS and prompting["stop"] == []


def test_eval_of_the_checkpoint_reproduces_the_runs_held_out_greedy_accuracy(short_run, recorded, tmp_path,
                                                                            capsys) -> None:
    checkpoint = short_run["dir"] / "checkpoint-2"
    [result] = run(eval_config(tmp_path, model_name_or_path=str(checkpoint)))
    # The same prompts training's held-out evaluation used: raw, with the run's system prompt and template.
    assert recorded[0].prompts == short_run["prompts"]
    assert short_run["prompts"][0].startswith("Compute.\n\n") and short_run["prompts"][0].endswith(" Answer: ")
    [cache_file] = (tmp_path / "eval").glob("*--checkpoint-2/arithmetic/problems.jsonl")
    cache = [json.loads(line) for line in cache_file.read_text().splitlines()]
    assert [r["completions"][0] for r in cache] == short_run["completions"]
    assert result["metrics"]["accuracy"]["value"] == short_run["summary"]["eval_after"]["greedy_accuracy"]
    assert result["model"]["generation"]["chat_template"] is False
    out = capsys.readouterr().out
    assert ("chat_template=false, system_prompt='Compute.', prompt_template='{question} Answer: ' "
            f"(trained with, {checkpoint / PROMPTING_FILE})") in out
    assert "note:" not in out  # generated with training's length and stop strings


def test_the_native_backend_gives_the_runs_greedy_completions(short_run, tmp_path) -> None:
    """backend=native (our decode loop, on the lean runtime on a CPU): the same greedy completions and accuracy
    as the run's own held-out evaluation."""
    checkpoint = short_run["dir"] / "checkpoint-2"
    [result] = run(eval_config(tmp_path, model_name_or_path=str(checkpoint), backend="native"))
    [cache_file] = (tmp_path / "eval").glob("*--checkpoint-2/arithmetic/problems.jsonl")
    cache = [json.loads(line) for line in cache_file.read_text().splitlines()]
    assert [r["completions"][0] for r in cache] == short_run["completions"]
    assert result["metrics"]["accuracy"]["value"] == short_run["summary"]["eval_after"]["greedy_accuracy"]


def test_eval_says_when_it_generates_longer_than_training(short_run, recorded, tmp_path, capsys) -> None:
    run(eval_config(tmp_path, model_name_or_path=str(short_run["dir"] / "checkpoint-2"), max_new_tokens=6))
    assert (f"note: max_new_tokens=6 here, {MAX_NEW_TOKENS} in training's held-out evaluation "
            f"(pass max_new_tokens={MAX_NEW_TOKENS} to generate as it did)") in capsys.readouterr().out


def test_eval_settings_given_explicitly_win_over_the_checkpoints(short_run, recorded, tmp_path, capsys) -> None:
    checkpoint = short_run["dir"] / "checkpoint-2"
    run(eval_config(tmp_path, model_name_or_path=str(checkpoint), chat_template=True, system_prompt=""))
    assert all(p.startswith("<|user|>") for p in recorded[0].prompts), recorded[0].prompts[0]
    out = capsys.readouterr().out
    assert "chat_template=true (chat_template= given); system_prompt=None (system_prompt= given)" in out


def test_a_plain_model_folder_keeps_the_tokenizers_chat_template(short_run, recorded, tmp_path) -> None:
    import shutil

    folder = tmp_path / "plain"
    shutil.copytree(short_run["dir"] / "checkpoint-2", folder)
    (folder / PROMPTING_FILE).unlink()
    (folder / "manifest.json").unlink()
    run(eval_config(tmp_path, model_name_or_path=str(folder)))
    assert all(p.startswith("<|user|>") for p in recorded[0].prompts)


def test_the_eval_command_says_which_prompting_it_used(short_run, tmp_path) -> None:
    """End to end through the console entry point: one line per setting and where it came from."""
    checkpoint = short_run["dir"] / "checkpoint-2"
    proc = subprocess.run(
        [sys.executable, "-c", "from benchmarks.cli import eval_main; eval_main()", "benchmark=arithmetic",
         f"model={checkpoint}", f"limit={EVAL_PROBLEMS}", f"max_new_tokens={MAX_NEW_TOKENS}", "progress=false",
         "backend=hf", "device=cpu", "score_workers=1", f"output_dir={tmp_path / 'eval'}",
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "prompting arithmetic" in proc.stdout and "(trained with," in proc.stdout
    accuracy = 100 * short_run["summary"]["eval_after"]["greedy_accuracy"]
    assert f"accuracy {accuracy:.2f}" in proc.stdout


def user_verifier(completion: str, reference, **fields):
    """A plugin verifier that reports no extracted answer (``VerifierResult.ok(score)`` alone)."""
    from rewards import VerifierResult

    return VerifierResult.ok(float(completion.strip() == str(reference)))


def test_users_own_task_by_path_with_a_plugin_verifier(tmp_path, recorded) -> None:
    """The issue's case: a definition YAML passed by path, scored by a verifier without ``extracted``.
    Training's held-out Maj@K and ``reasoning-rl-eval benchmark=<path>.yaml model=<checkpoint>`` both vote
    by completion text, and the eval prompts the checkpoint as training did (no chat template)."""
    from rewards import register_verifier, unregister_verifier

    source = (Path(__file__).parents[2] / "reasoning_rl" / "tasks" / "definitions" / "arithmetic.yaml").read_text()
    definition = tmp_path / "my_sums.yaml"
    definition.write_text(source.replace("name: arithmetic", "name: my_sums")
                          .replace("name: math", "name: t_user_plain")
                          .replace('prompt_template: "{question} Answer: "', 'prompt_template: "Sum: {question} ="'))
    register_verifier("t_user_plain")(user_verifier)
    try:
        cfg = short_run_config()
        cfg.task.name = str(definition)
        cfg.task.prompt_template = None
        cfg.task.system_prompt = None
        cfg.rollout.reward_workers = 0
        cfg.evaluation.samples_per_problem = 2
        trainer = Trainer(cfg, tmp_path / "run")
        try:
            summary = trainer.train()
            prompts = [e.prompt for e in trainer.eval_examples]
        finally:
            trainer.close()
        assert {"maj@2", "pass@1"} <= set(summary["eval_after"])
        [result] = run(eval_config(tmp_path, benchmark=str(definition), score_workers=0,
                                   model_name_or_path=str(tmp_path / "run" / "checkpoint-2")))
    finally:
        unregister_verifier("t_user_plain")
    assert recorded[0].prompts == prompts and prompts[0].startswith("Sum: ")
    assert result["metrics"]["accuracy"]["value"] == summary["eval_after"]["greedy_accuracy"]
    assert result["maj_votes"] == {"extracted": 0, "completion": EVAL_PROBLEMS, "none": 0}


def test_run_dir_sweep_reproduces_the_held_out_greedy_accuracy(short_run, recorded, tmp_path) -> None:
    """``reasoning-rl-eval run_dir=<run> benchmark=arithmetic``: the same prompts as training, the same accuracy."""
    [result] = run(eval_config(tmp_path, run_dir=str(short_run["dir"])))
    assert result["model"]["step"] == 2
    assert recorded[0].prompts == short_run["prompts"]
    assert result["metrics"]["accuracy"]["value"] == short_run["summary"]["eval_after"]["greedy_accuracy"]


def test_sweep_leaves_out_a_corrupt_checkpoint_and_says_which(tiny_run, tmp_path, capsys) -> None:
    """tiny_run's folders are plain save_pretrained output (no manifest): the structural check finds a
    truncated weights file; the sweep goes on with the intact checkpoint and prints which it left out."""
    import shutil

    from reasoning_rl.run_folder.checkpoint import CheckpointError

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    weights = run_dir / "checkpoint-10" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    results = run(eval_config(tmp_path, run_dir=str(run_dir), limit=2))
    assert [r["model"]["step"] for r in results] == [5]
    err = capsys.readouterr().err
    assert f"skipping {run_dir / 'checkpoint-10'}: corrupt (model.safetensors is" in err
    weights = run_dir / "checkpoint-5" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match=r"every checkpoint of .* is corrupt"):
        run(eval_config(tmp_path, run_dir=str(run_dir), limit=2))
