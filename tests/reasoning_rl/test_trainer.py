"""End-to-end GRPO runs of the tiny model on the arithmetic task (CPU, a few steps)."""

import json
import math

import pytest
import torch

from reasoning_rl.run_folder.checkpoint import latest_checkpoint, list_checkpoints
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trainer import Trainer
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import _train, assert_runs_train_alike
from tests.reasoning_rl.documented_metrics import METRICS_DOC, undocumented


@pytest.mark.numerics
def test_end_to_end_logs_checkpoints_and_reloads(small_cfg, tmp_path):
    trainer, summary = _train(small_cfg, tmp_path / "run")
    run = tmp_path / "run"
    metrics = read_metrics(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    # Every key the trainer logs is described in docs/metrics.md (read from the doc, so the check
    # cannot drift from what is logged), and every step logs the same keys.
    assert undocumented(metrics[0]) == [], f"document these in {METRICS_DOC}"
    assert all(set(m) == set(metrics[0]) for m in metrics)
    assert undocumented(["reward/math", "eval/pass@8", "made/up"]) == ["made/up"]  # the doc's patterns are read
    # policy == reference at step 1: the KL is the rounding of two log-prob paths (terms: the decoder's chain;
    # scale: a log-prob, about log V), and k3 ~ d^2 / 2 makes it far smaller still.
    assert_close_up_to_rounding(metrics[0]["kl/mean"], 0.0, terms=decoder_terms(trainer.model.config, positions=64),
                                scale=math.log(trainer.model.config.vocab_size), msg="kl/mean at step 1")
    rows = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 2 * 4  # steps * prompts * group
    assert {"completion", "reward", "advantage", "verifier_info", "reference"} <= set(rows[0])
    # A scored completion says what the math verifier extracted and compared; an unscored one
    # (a verifier timeout on a loaded machine) is counted in reward/unscorable_fraction.
    scored = [r for r in rows if r["reward"] is not None]
    assert scored and all({"extracted", "gold", "strategy"} <= set(r["verifier_info"]["math"]) for r in scored)
    assert len(rows) - len(scored) == round(sum(m["reward/unscorable_fraction"] for m in metrics) * 8)
    # checkpoints: every 2 steps and at the end, Hugging Face format
    assert [p.name for p in list_checkpoints(run)] == ["checkpoint-2", "checkpoint-4"]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(latest_checkpoint(run))
    AutoTokenizer.from_pretrained(latest_checkpoint(run))
    for a, b in zip(model.parameters(), trainer.model.parameters()):
        assert torch.equal(a, b)
    assert (run / "reward_curve.png").stat().st_size > 0
    assert set(summary["eval_after"]) >= {"greedy_accuracy", "sampled_accuracy"}
    assert (run / "reference" / "config.json").exists()


@pytest.mark.numerics
def test_resume_matches_uninterrupted_run(small_cfg, tmp_path, resume_matches_uninterrupted_run):
    resume_matches_uninterrupted_run(small_cfg, tmp_path)  # the assertions are in conftest.py


@pytest.mark.numerics
def test_shared_prompt_forward_trains_like_the_full_forward(small_cfg, tmp_path):
    """Same seed, same steps: encoding each group's prompt once changes nothing but speed."""
    from rewards.specs import RewardSpec

    small_cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]  # varies within groups
    small_cfg.trainer.steps = 3
    small_cfg.evaluation.enabled = False
    small_cfg.algo.micro_batch_size = 8  # whole groups either way: the same accumulation
    for shared in (True, False):
        small_cfg.algo.shared_prompt_forward = shared
        trainer, _ = _train(small_cfg, tmp_path / str(shared))
    a, b = (read_metrics(tmp_path / str(shared) / "metrics.jsonl") for shared in (True, False))
    assert any(m["advantage/abs_mean"] > 0 for m in a)  # the updates did something
    assert_runs_train_alike((a, b), small_cfg, trainer.model.config)  # the same sums, the prompt's reused


def test_num_iterations_reuses_rollouts(small_cfg, tmp_path):
    from rewards.specs import RewardSpec

    # a reward that varies within groups even for an untrained model: "has a digit"
    small_cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
    small_cfg.algo.num_iterations = 3
    small_cfg.algo.kl.beta = 0.0
    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    trainer, _ = _train(small_cfg, tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    # after the first of the mu updates the policy moved away from pi_old: ratio != 1
    assert any(abs(m["ratio/mean"] - 1.0) > 1e-6 for m in metrics)
    assert trainer.algorithm.ref_model is None  # beta = 0: no reference model at all
    assert not (tmp_path / "run" / "reference").exists()


def test_bad_config_is_rejected_with_the_key(small_cfg, tmp_path):
    small_cfg.algo.group_size = 1
    small_cfg.algo.loss_aggregation = "median"
    with pytest.raises(ValueError) as info:
        Trainer(small_cfg, tmp_path)
    assert "algo.group_size" in str(info.value) and "algo.loss_aggregation" in str(info.value)


def test_none_rewards_get_zero_advantage(small_cfg, tmp_path):
    """A reward that cannot score leaves the sample out (NaN reward, advantage 0), never 0."""
    from rewards.specs import RewardSpec

    small_cfg.task.rewards = [RewardSpec(name="overlong", options={"max_length": 4, "buffer": 2,
                                                                    "length_field": "missing"})]
    small_cfg.trainer.steps = 1
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        ro = trainer.algorithm.rollout(0)
    finally:
        trainer.close()
    assert torch.isnan(ro.rewards).all()
    assert ro.advantages.abs().sum() == 0
    assert ro.verifier_failures["unscorable"] == 8
    assert not math.isnan(float(ro.advantages.sum()))


def test_generic_hugging_face_path_with_chat_template(small_cfg, tmp_path):
    """A randomly initialised tiny Qwen2 saved with save_pretrained plus a locally built
    tokenizer with a chat template: the same loop through AutoModelForCausalLM /
    AutoTokenizer, as a real model such as Qwen2.5-0.5B-Instruct takes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from reasoning_rl.policy.loading import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=64, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model_dir = tmp_path / "qwen2-tiny"
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    assert AutoTokenizer.from_pretrained(model_dir).chat_template

    small_cfg.model.name_or_path = str(model_dir)
    small_cfg.task.use_chat_template = True
    small_cfg.task.system_prompt = "Answer with a number."
    small_cfg.trainer.steps = 2
    trainer, _ = _train(small_cfg, tmp_path / "run")
    assert type(trainer.model).__name__ == "Qwen2ForCausalLM"
    assert trainer.train_examples[0].prompt.startswith("<|system|>Answer with a number.")
    assert trainer.train_examples[0].prompt.endswith("<|assistant|>")
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == 2
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-2")
    assert type(reloaded).__name__ == "Qwen2ForCausalLM"


def test_missing_checkpoint_is_a_clear_error(small_cfg, tmp_path):
    small_cfg.model.name_or_path = str(tmp_path / "no-such-checkpoint")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Trainer(small_cfg, tmp_path / "run")


def test_a_resumed_run_keeps_the_memory_settings(small_cfg, tmp_path):
    """Resuming loads the policy from its checkpoint (not through load_model) and the reference from
    reference/: both keep model.gradient_checkpointing, model.lm_head_chunk and model.runtime, as a fresh
    start has."""
    from reasoning_rl.policy.lm_head import chunk_of
    from reasoning_rl.policy.runtime import runtime_of

    small_cfg.model.gradient_checkpointing, small_cfg.model.lm_head_chunk = True, "3"
    small_cfg.model.runtime = "hf"  # not what auto picks on the CPU
    small_cfg.trainer.steps, small_cfg.trainer.save_every = 2, 1
    small_cfg.evaluation.enabled = False
    _train(small_cfg, tmp_path / "run")
    small_cfg.trainer.steps, small_cfg.trainer.resume = 3, True
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        assert trainer.resume_from is not None and trainer.resume_from.name == "checkpoint-2"
        assert trainer.model.is_activation_checkpointing
        assert chunk_of(trainer.model) == 3
        trainer.train()
        assert [m["step"] for m in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3]
        assert runtime_of(trainer.model).runtime == runtime_of(trainer.algorithm.ref_model).runtime == "hf"
    finally:
        trainer.close()
