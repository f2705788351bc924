"""evaluation.retention: held-out accuracy on a second task before and after training (reasoning_rl.evaluation.retention)."""

import json
import os
import subprocess
import sys

import pytest

from reasoning_rl.cli import format_eval_table
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.evaluation.heldout import evaluate_heldout
from reasoning_rl.policy.engines import HFEngine
from reasoning_rl.policy.loading import load_pretrained
from reasoning_rl.reporting.report import RunRecord, format_table
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.tasks import Example, get_definition, load_problems
from reasoning_rl.trainer import Trainer
from reasoning_rl.validation import validate
from rewards.compose import CompositeReward
from rewards.specs import RewardSpec
from tests.reasoning_rl.conftest import _train

# A second task given by path: products instead of the training task's sums, scored by the math verifier.
PRODUCTS = """\
name: products
version: 1
description: products of small numbers, a retention task for the tests
source:
  generator: reasoning_rl.tasks.arithmetic:make_arithmetic_dataset
  kwargs: {max_operand: 9, operations: "*", test_fraction: 0.5}
splits:
  test:
    description: held-out products
    kwargs: {num_examples: 40, seed: 1, cycle: false}
eval_split: test
train_split: null
id_field: id
prompt_template: "{question} Answer: "
answer_field: answer
verifier:
  name: math
"""


@pytest.fixture
def retention_cfg(small_cfg, tmp_path):
    path = tmp_path / "products.yaml"
    path.write_text(PRODUCTS)
    small_cfg.evaluation.retention.task = str(path)
    small_cfg.evaluation.retention.num_examples = 5
    small_cfg.evaluation.retention.samples_per_problem = 2
    small_cfg.trainer.steps = 2
    return small_cfg


def _direct(engine, cfg):
    """The held-out evaluation called by hand on the second task: its first N problems, the training
    task's prompt rendering (raw here), its verifier, the run's sampling settings and seed."""
    definition = get_definition(cfg.evaluation.retention.task)
    problems, _ = load_problems(definition, "test", limit=cfg.evaluation.retention.num_examples)
    examples = [Example(p.task_id, p.prompt, p.reference, p.fields) for p in problems]
    sampling = SamplingConfig(temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k,
                              max_new_tokens=cfg.rollout.max_new_tokens, stop=[])
    result = evaluate_heldout(engine, examples, CompositeReward([RewardSpec(name="math")]), sampling,
                              cfg.evaluation.retention.samples_per_problem, seed=cfg.trainer.seed)
    return {f"retention/{k}": v for k, v in result.as_dict().items()}


def test_evaluate_adds_the_second_task_equal_to_a_direct_call(retention_cfg, tmp_path):
    trainer = Trainer(retention_cfg, tmp_path / "run")
    try:
        got = trainer.evaluate()
        direct = _direct(trainer.engine, retention_cfg)
        heldout = evaluate_heldout(trainer.engine, trainer.eval_examples, trainer.reward, trainer.sampling,
                                   retention_cfg.evaluation.samples_per_problem, seed=retention_cfg.trainer.seed,
                                   timeout=retention_cfg.rollout.reward_timeout)
    finally:
        trainer.close()
    assert {k: v for k, v in got.items() if k.startswith("retention/")} == direct
    assert direct["retention/num_problems"] == 5 and direct["retention/samples_per_problem"] == 2
    # The training task's own held-out numbers are as without retention.
    assert {k: v for k, v in got.items() if not k.startswith("retention/")} == heldout.as_dict()


def test_a_run_writes_retention_before_and_after(retention_cfg, tmp_path):
    _, summary = _train(retention_cfg, tmp_path / "run")
    run = tmp_path / "run"
    before = json.loads((run / "eval_before.json").read_text())
    after = json.loads((run / "eval_after.json").read_text())
    assert summary["eval_before"] == before and summary["eval_after"] == after
    for result in (before, after):
        assert {"retention/greedy_accuracy", "retention/sampled_accuracy", "retention/pass@2",
                "retention/maj@2"} <= set(result)
    # After: the same numbers as the evaluation called directly on the final checkpoint.
    model, tok = load_pretrained(summary["final_checkpoint"])
    assert {k: v for k, v in after.items() if k.startswith("retention/")} == _direct(HFEngine(model, tok), retention_cfg)
    table = format_eval_table(summary)
    assert "| retention greedy (5 problems) |" in table and "| retention sampled (n=2) |" in table


def test_the_report_shows_retention_only_when_a_run_measured_it():
    plain = RunRecord(path="a", setting="algo=grpo", seed=0, status="finished", steps_done=2, steps_total=2)
    assert "retention" not in format_table([plain])
    measured = RunRecord(path="b", setting="algo=grpo", seed=1, status="finished", steps_done=2, steps_total=2,
                         retention_before=0.5, retention_after=0.25)
    table = format_table([plain, measured])
    assert "retention greedy before / after |" in table.splitlines()[0]
    assert table.splitlines()[3].endswith("| 50.0% / 25.0% |")


def test_bad_settings_are_refused_before_the_run(small_cfg):
    small_cfg.evaluation.retention.task = "gsm9k"
    with pytest.raises(ConfigError, match=r"^invalid configuration: evaluation.retention.task: unknown task 'gsm9k'"):
        validate(small_cfg)
    small_cfg.evaluation.retention.task = "math500"  # an evaluation set: its test split, no train split needed
    validate(small_cfg)
    small_cfg.evaluation.retention.split = "train"
    with pytest.raises(ConfigError, match=r"'math500' has no split 'train'; its splits: test"):
        validate(small_cfg)
    small_cfg.evaluation.retention.split = None
    small_cfg.evaluation.enabled = False
    with pytest.raises(ConfigError, match=r"needs evaluation\.enabled=true"):
        validate(small_cfg)


def test_a_bad_task_name_is_one_line_exit_2_and_writes_nothing(tmp_path):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", "evaluation.retention.task=gsm9k",
                          f"trainer.output_dir={run}"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("reasoning-rl-train: invalid configuration: evaluation.retention.task: unknown task "
                           "'gsm9k'. Did you mean 'gsm8k'?")
    assert not run.exists()
