"""GRPO's neighbours as settings of the grpo module: KL estimators, GSPO's sequence ratio,
REINFORCE++, DAPO's dynamic sampling and iterative GRPO's reference reset."""

import math

import pytest
import torch

from reasoning_rl.algo import compute_advantages
from reasoning_rl.algo.groups import informative_groups
from reasoning_rl.algo.losses import (
    KL_ESTIMATORS,
    KLConfig,
    LossGroups,
    PolicyLossConfig,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
)
from reasoning_rl.algo.policy_objectives import sequence_log_ratio
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import _train, tiny_model_config

LOG_HALF = math.log(0.5)


def test_kl_estimators_on_hand_worked_numbers():
    # pi_theta = 0.4, pi_ref = 0.2: log ratio log(pi/pi_ref) = log 2
    logp, ref = torch.tensor([math.log(0.4)]), torch.tensor([math.log(0.2)])
    assert kl_k1(logp, ref).item() == pytest.approx(math.log(2))           # 0.693147
    assert kl_k2(logp, ref).item() == pytest.approx(0.5 * math.log(2) ** 2)  # 0.240227
    k3 = 0.5 - LOG_HALF - 1                                                # 0.193147
    assert kl_k3(logp, ref).item() == pytest.approx(k3)
    # k3_is = ratio * k3; with pi_old = 0.5 * pi_theta the ratio is 2
    old = logp + LOG_HALF
    assert KL_ESTIMATORS["k3_is"](logp, ref, old).item() == pytest.approx(2 * k3)


def test_importance_weighted_k3_has_another_gradient_even_at_ratio_one():
    # pi_ref / pi = 0.5, ratio 1 (old = logp):
    #   d k3 / d logp          = 1 - pi_ref/pi           = 0.5
    #   d (ratio k3) / d logp  = k3 + (1 - pi_ref/pi)    = 0.193147 + 0.5 = 0.693147   (+38.6%)
    logp = torch.tensor([0.0], requires_grad=True)
    ref = torch.tensor([LOG_HALF])
    (g3,) = torch.autograd.grad(KL_ESTIMATORS["k3"](logp, ref, logp.detach()).sum(), logp)
    (gis,) = torch.autograd.grad(KL_ESTIMATORS["k3_is"](logp, ref, logp.detach()).sum(), logp)
    assert g3.item() == pytest.approx(0.5)
    assert gis.item() == pytest.approx(0.5 - LOG_HALF - 1 + 0.5)


def test_gspo_sequence_ratio():
    # log ratios 0.2 and 0.4 on a 2-token sample, one padded position: log s = 0.3 on both tokens
    logp = torch.tensor([[0.2, 0.4, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert sequence_log_ratio(logp, torch.zeros(1, 3), mask)[0, :2].tolist() == pytest.approx([0.3, 0.3])
    # A = +1, eps_high = 0.2: s = exp(0.3) = 1.35 is clipped at 1.2 -> per-token loss -1.2
    out = grpo_loss(logp, torch.zeros(1, 3), None, torch.tensor([1.0]), mask,
                    LossGroups(policy=PolicyLossConfig(eps_low=0.2, eps_high=0.2, ratio_level="sequence"),
                               kl=KLConfig(beta=0.0)))
    assert out.loss.item() == pytest.approx(-1.2) and out.clip_high_fraction == 1.0


def test_reinforce_pp_group_baseline_then_batch_scale():
    # groups [1, 0] and [1, 1]: minus group means -> [0.5, -0.5, 0, 0]; batch mean 0,
    # population std sqrt((0.25 + 0.25) / 4) = 0.353553 -> [1.414214, -1.414214, 0, 0]
    adv = compute_advantages(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), "reinforce_pp", eps=0.0)
    assert adv.flatten().tolist() == pytest.approx([math.sqrt(2), -math.sqrt(2), 0.0, 0.0])


def test_informative_groups():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [math.nan, 1.0], [0.0, math.nan]])
    assert informative_groups(rewards).tolist() == [True, False, False, False]


def test_dynamic_sampling_keeps_informative_groups_and_counts_the_waste(small_cfg, tmp_path):
    from reasoning_rl.run_folder.metrics_log import read_metrics
    from rewards.specs import RewardSpec

    small_cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
    small_cfg.algo.dynamic_sampling.enabled = True
    small_cfg.algo.dynamic_sampling.max_rounds = 4
    small_cfg.trainer.steps = 3
    small_cfg.evaluation.enabled = False
    _train(small_cfg, tmp_path / "run")
    g, b = small_cfg.algo.group_size, small_cfg.algo.prompts_per_step
    for m in read_metrics(tmp_path / "run" / "metrics.jsonl"):
        kept, rounds = m["dynamic/groups_kept"], m["dynamic/extra_rounds"]
        assert 1 <= kept <= b and 0 <= rounds <= 4
        assert m["dynamic/wasted_rollouts"] == (1 + rounds) * b * g - kept * g
        if kept == b and rounds < 4:
            assert m["groups/zero_std_fraction"] == 0.0  # every trained group carries a signal


def test_iterative_grpo_resets_the_reference(small_cfg, tmp_path):
    from transformers import AutoModelForCausalLM

    small_cfg.algo.kl.ref_reset_every = 2
    small_cfg.trainer.steps = 3
    small_cfg.evaluation.enabled = False
    trainer, _ = _train(small_cfg, tmp_path / "run")
    # The reset before step 3 copied the policy after 2 steps, which checkpoint-2 holds.
    ckpt = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-2")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "reference")
    for a, b, c in zip(ckpt.parameters(), saved.parameters(), trainer.algorithm.ref_model.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)
    # Memory: GRPO holds the policy and pi_ref (2x the parameters), AdamW two moments of the policy.
    import json

    memory = json.loads((tmp_path / "run" / "summary.json").read_text())["memory"]
    policy_gb = sum(p.numel() * 4 for p in trainer.model.parameters()) / 1024 ** 3
    assert memory["parameters_gb"] == pytest.approx(2 * policy_gb)
    assert memory["gradients_gb"] == pytest.approx(policy_gb)
    assert 2 * policy_gb <= memory["optimizer_gb"] <= 2.01 * policy_gb


@pytest.mark.numerics
def test_top_k_top_p_sampling_trains_on_the_sampled_distribution(small_cfg, tmp_path):
    """With top-k / top-p sampling the trainer's log-probs are renormalised over the tokens the
    sampler could draw, so every sampled token has a finite log-prob. At mu = 2 with a policy that
    does not move (lr 0), pi_old's log-probs (computed before the update, frozen_logprobs) and the
    training forward's must agree: ratio 1. (At mu = 1 pi_old is a detached copy: ratio 1 always.)"""
    from reasoning_rl.run_folder.metrics_log import read_metrics

    small_cfg.rollout.top_k, small_cfg.rollout.top_p = 5, 0.9
    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    small_cfg.algo.num_iterations, small_cfg.algo.learning_rate = 2, 0.0
    _train(small_cfg, tmp_path / "run")
    config = tiny_model_config(small_cfg.model.tiny)
    for m in read_metrics(tmp_path / "run" / "metrics.jsonl"):
        for key in ("loss/total", "kl/mean", "entropy/mean", "grad/norm"):
            assert math.isfinite(m[key]), key
        # Two evaluations of one forward (pi_old's frozen pass, the training pass): rounding at log-prob scale.
        assert_close_up_to_rounding(m["ratio/mean"], 1.0, terms=decoder_terms(config, positions=64),
                                    scale=math.log(config.vocab_size), msg=f"step {m['step']} ratio/mean")
