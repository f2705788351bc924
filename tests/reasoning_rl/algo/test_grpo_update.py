"""GRPO's update through the run loop: micro-batching, and leaving out the groups whose gradient is 0,
never change the result."""

import copy

import pytest
import torch

from reasoning_rl.policy.precision import MixedPrecision
from reasoning_rl.trainer import Trainer
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import assert_runs_train_alike

pytestmark = pytest.mark.numerics


def _assert_same_update(full, split, trainer, rows, mu, msg=""):
    """Micro-batching only regroups the gradient's sum over rows: equal up to rounding (tests/conftest.py's
    rule), mu updates of a decoder chain over under 64 positions (the tiny task's prompts are at most 25 tokens)."""
    (g_full, p_full, m_full), (g_split, p_split, m_split) = full, split
    terms = mu * decoder_terms(trainer.model.config, 64, rows)
    for name in g_full:
        assert_close_up_to_rounding(g_split[name], g_full[name], terms=terms, msg=f"{msg} grad {name}")
        assert_close_up_to_rounding(p_split[name], p_full[name], terms=terms, msg=f"{msg} param {name}")
    assert_runs_train_alike(([m_split | {"step": 1}], [m_full | {"step": 1}]), trainer.cfg, trainer.model.config,
                            keys=("loss/total", "loss/policy", "kl/mean", "ratio/mean", "entropy/mean", "grad/norm"))


def _update_from_the_same_start(trainer, ro, micro_batch_size):
    """One GRPO update (mu optimiser steps) on ``ro`` from the current policy, which is
    restored afterwards; returns the last step's gradients, the parameters and the metrics.
    Plain SGD instead of AdamW: Adam's first step is lr * sign(g), which turns float noise
    in a near-zero gradient into a full-size difference."""
    algo, model = trainer.algorithm, trainer.model
    start = copy.deepcopy(model.state_dict())
    algo.cfg.micro_batch_size = micro_batch_size
    algo.optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    algo.scheduler = torch.optim.lr_scheduler.LambdaLR(algo.optimizer, lambda _: 1.0)
    metrics = algo.update(ro)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.load_state_dict(start)
    return grads, params, metrics


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant"])
@pytest.mark.parametrize("mu", [1, 2])
def test_micro_batched_update_equals_full_batch_update(small_cfg, tmp_path, aggregation, mu):
    small_cfg.algo.loss_aggregation = aggregation
    small_cfg.algo.num_iterations = mu
    small_cfg.algo.kl.beta = 0.04  # the KL term's gradient is normalised too
    small_cfg.algo.max_grad_norm = 0.0  # clipping would hide a scale error
    small_cfg.algo.shared_prompt_forward = False  # rows of any count per micro-batch
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)  # the reference model
        ro = trainer.algorithm.rollout(0)
        # Fixed advantages so every row pulls (the sampled rewards may all be equal at step 0).
        ro.advantages = torch.linspace(-1.0, 1.0, len(ro.completions))
        g_full, p_full, m_full = _update_from_the_same_start(trainer, ro, micro_batch_size=len(ro.completions))
        g_split, p_split, m_split = _update_from_the_same_start(trainer, ro, micro_batch_size=3)  # 3 + 3 + 2 rows
    finally:
        trainer.close()
    assert any(g.abs().max() > 1e-4 for g in g_full.values())
    _assert_same_update((g_full, p_full, m_full), (g_split, p_split, m_split), trainer, len(ro.completions), mu)


def test_grad_norm_is_the_mean_over_the_mu_updates(small_cfg, tmp_path):
    """With lr = 0 the policy never moves, so each of mu updates sees the same gradient:
    the logged norm must not depend on mu (a sum over updates would double it at mu = 2)."""
    small_cfg.algo.learning_rate = 0.0
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        ro = trainer.algorithm.rollout(0)
        ro.advantages = torch.linspace(-1.0, 1.0, len(ro.completions))
        norms = {}
        for mu in (1, 2):
            trainer.algorithm.cfg.num_iterations = mu
            norms[mu] = trainer.algorithm.update(ro)["grad/norm"]
    finally:
        trainer.close()
    assert norms[1] > 0
    # The same gradient twice: the norm of the mean of two equal sums, one more term per element.
    assert_close_up_to_rounding(norms[2], norms[1], terms=2)


def test_micro_batches_smaller_than_a_group_equal_the_one_batch_update(small_cfg, tmp_path, caplog):
    """Issue 28: G = 4, 8 rows. The shared-prompt forward on the whole batch (one pass, each prompt
    once per group) against micro-batches of 2 rows (half groups: the prompt once per 2 rows), 3
    rows (3 + 3 + 2, cutting groups anywhere: the shared forward steps aside, said once) and 1 row.
    The advantages are fixed over whole groups before the split; values and gradients must agree."""
    small_cfg.algo.kl.beta = 0.04
    small_cfg.algo.max_grad_norm = 0.0  # clipping would hide a scale error
    small_cfg.evaluation.enabled = False
    assert small_cfg.algo.shared_prompt_forward and small_cfg.algo.group_size == 4
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        ro = trainer.algorithm.rollout(0)
        ro.advantages = torch.linspace(-1.0, 1.0, len(ro.completions))
        with caplog.at_level("INFO", logger="reasoning_rl.algo.grpo"):
            runs = {m: _update_from_the_same_start(trainer, ro, micro_batch_size=m) for m in (8, 2, 3, 1, 3)}
    finally:
        trainer.close()
    assert len(ro.completions) == 8
    g_full = runs[8][0]
    assert any(g.abs().max() > 1e-4 for g in g_full.values())
    for m in (2, 3, 1):
        _assert_same_update(runs[8], runs[m], trainer, len(ro.completions), 1, msg=f"micro-batch {m}")
    # Why the shared forward shares per 2 rows (m = 2) or steps aside (m = 3 and 1, gcd 1): said once
    # each, though m = 3 ran twice.
    assert caplog.text.count("once per 2 rows") == 1
    assert caplog.text.count("steps aside: algo.micro_batch_size=3 ") == 1
    assert caplog.text.count("steps aside: algo.micro_batch_size=1 ") == 1


PAPER_GROUP_AND_A_FLAT_ONE = [1.0, -1.0, 1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
"""G = 4: the paper's group (rewards [1, 0, 1, 0]) and a group whose 4 rewards are equal."""


def _skip(trainer, on):
    trainer.algorithm.cfg.skip_zero_advantage_groups = on
    return trainer


@pytest.mark.parametrize("aggregation", ["sequence_mean", "token_mean", "constant"])
def test_leaving_out_zero_advantage_groups_gives_the_same_update(small_cfg, tmp_path, aggregation):
    """algo.skip_zero_advantage_groups: the flat group's rows carry loss 0 and gradient 0 (beta = 0), so the
    update without their passes has the same gradient, parameters and loss; the denominators still count
    all 8 rows (a denominator of the 4 trained rows would double the step)."""
    small_cfg.algo.kl.beta = 0.0
    small_cfg.algo.loss_aggregation = aggregation
    small_cfg.algo.max_grad_norm = 0.0  # clipping would hide a scale error
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        ro = trainer.algorithm.rollout(0)
        ro.advantages = torch.tensor(PAPER_GROUP_AND_A_FLAT_ONE)
        g_all, p_all, m_all = _update_from_the_same_start(_skip(trainer, False), ro, micro_batch_size=8)
        g_kept, p_kept, m_kept = _update_from_the_same_start(_skip(trainer, True), ro, micro_batch_size=8)
    finally:
        trainer.close()
    assert any(g.abs().max() > 1e-4 for g in g_all.values())
    terms = decoder_terms(trainer.model.config, 64, 8)
    for name in g_all:
        assert_close_up_to_rounding(g_kept[name], g_all[name], terms=terms, msg=f"grad {name}")
        assert_close_up_to_rounding(p_kept[name], p_all[name], terms=terms, msg=f"param {name}")
    for key in ("loss/total", "loss/policy", "grad/norm"):
        assert_close_up_to_rounding(m_kept[key], m_all[key], terms=terms, msg=key)
    assert m_kept["update/rows_left_out"] == 4 and "update/rows_left_out" not in m_all


def test_a_step_with_every_group_left_out_still_steps_adamw(small_cfg, tmp_path):
    """A step whose groups are all flat runs no pass at all; AdamW must still step on a zero gradient (its
    first moment from the step before moves the weights), as it does when the passes run and give exactly 0.
    Its token statistics are left out of the metrics rather than logged as NaN."""
    small_cfg.algo.kl.beta = 0.0
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    algo, model = trainer.algorithm, trainer.model
    try:
        algo.setup(None)
        informative, flat = algo.rollout(0), algo.rollout(1)
        informative.advantages = torch.tensor(PAPER_GROUP_AND_A_FLAT_ONE)
        flat.advantages = torch.zeros(len(flat.completions))
        start = copy.deepcopy(model.state_dict())
        after = {}
        for on in (False, True):
            _skip(trainer, on)
            algo.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            algo.scheduler = torch.optim.lr_scheduler.LambdaLR(algo.optimizer, lambda _: 1.0)
            algo.update(informative)
            moved = {n: p.detach().clone() for n, p in model.named_parameters()}
            metrics = algo.update(flat)
            after[on] = {n: p.detach().clone() for n, p in model.named_parameters()}
            model.load_state_dict(start)
    finally:
        trainer.close()
    assert any(not torch.equal(after[True][n], moved[n]) for n in moved)  # the zero-gradient step moved them
    terms = decoder_terms(trainer.model.config, 64, 8)
    for name in after[False]:
        assert_close_up_to_rounding(after[True][name], after[False][name], terms=terms, msg=f"param {name}")
    assert metrics["update/rows_left_out"] == 8 and metrics["loss/total"] == 0.0
    assert "entropy/mean" not in metrics and "cov/logp_advantage" not in metrics


def test_an_all_flat_first_step_under_fp16_loss_scaling(small_cfg, tmp_path):
    """fp16's loss scaler refuses to unscale before any backward; a first step with every group left out
    still runs one (of a zero loss), so it steps, and the weights stay where they were (Adam on g = 0)."""
    small_cfg.algo.kl.beta = 0.0
    small_cfg.algo.skip_zero_advantage_groups = True
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        trainer.algorithm.precision = MixedPrecision("fp16", "cpu")
        flat = trainer.algorithm.rollout(0)
        flat.advantages = torch.zeros(len(flat.completions))
        before = copy.deepcopy(trainer.model.state_dict())
        metrics = trainer.algorithm.update(flat)
        assert all(torch.equal(p, before[n]) for n, p in trainer.model.state_dict().items())
    finally:
        trainer.close()
    assert metrics["grad/norm"] == 0.0 and metrics["precision/skipped_steps"] == 0


def test_leaving_out_groups_is_refused_where_their_gradient_is_not_zero(small_cfg):
    small_cfg.algo.skip_zero_advantage_groups = True
    assert any("algo.skip_zero_advantage_groups" in p for p in small_cfg.algo.problems())  # beta = 0.04
    small_cfg.algo.kl.beta = 0.0
    assert small_cfg.algo.problems() == []
    small_cfg.algo.entropy_control.name = "kl_cov"
    assert any("kl_cov" in p for p in small_cfg.algo.problems())
