"""GRPO's update through the run loop: micro-batching never changes the result."""

import copy

import pytest
import torch

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
