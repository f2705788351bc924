"""trainer.precision: bf16/fp16 autocast of the training forward, float32 master weights and optimiser
states, fp16 loss scaling that skips steps with inf gradients, a float32 LM head."""

import copy
import dataclasses

import pytest
import torch

from reasoning_rl import compat
from reasoning_rl.algo.optim import step_optimizer
from reasoning_rl.algo.ppo import PPOConfig
from reasoning_rl.batching import pack
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.policy.lm_head import set_chunk
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.logprobs import completion_logprobs
from reasoning_rl.policy.precision import MixedPrecision, precision_problems, sampling_dtype
from reasoning_rl.trainer import Trainer
from reasoning_rl.validation import validate
from tests.conftest import assert_close_up_to_rounding

PROMPTS = [[5, 6, 7, 8]] * 2 + [[9, 10]] * 2
COMPLETIONS = [[11, 12, 13], [14, 15], [16, 17, 18], [19]]


@pytest.mark.numerics
@pytest.mark.parametrize("chunk", [0, 3])  # full logits, and the chunked LM head
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_log_probs_under_autocast_are_float32_and_near_the_float32_ones(chunk, dtype):
    model, tok = build_tiny_model()
    set_chunk(model, chunk)
    packed = pack(PROMPTS, COMPLETIONS, tok.pad_token_id)
    args = (model, packed.input_ids, packed.attention_mask, packed.completion_start)
    exact, _ = completion_logprobs(*args, group_size=2)
    with MixedPrecision({torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]).autocast():
        low, entropy = completion_logprobs(*args, group_size=2, with_entropy=True)
    assert low.dtype == torch.float32 and entropy.dtype == torch.float32  # the LM head's logsumexp in float32
    # Under autocast each matmul accumulates in float32 and rounds its output once to the low precision: the
    # rule of tests/conftest.py with that dtype's eps and one term per rounding, 7 matmuls in each of the tiny
    # model's 2 layers and the LM head's (the log-probs are about -4.6 = log 1/100 in size).
    assert_close_up_to_rounding(low, exact, terms=2 * 7 + 1, dtype=dtype)
    assert (low - exact).abs().max() > 0  # autocast really computed in the lower precision


def _one_update(trainer, ro, precision):
    """One GRPO update from the trainer's current policy and a fresh AdamW, restored afterwards;
    returns the parameter change of every parameter."""
    algo, model = trainer.algorithm, trainer.model
    start = copy.deepcopy(model.state_dict())
    algo.precision = MixedPrecision(precision, "cpu")
    algo.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    algo.scheduler = torch.optim.lr_scheduler.LambdaLR(algo.optimizer, lambda _: 1.0)
    algo.update(ro)
    delta = {n: (p.detach() - start[n]).clone() for n, p in model.named_parameters()}
    dtypes = {p.dtype for p in model.parameters()} | {v.dtype for s in algo.optimizer.state.values()
                                                      for v in s.values() if torch.is_tensor(v) and v.numel() > 1}
    model.load_state_dict(start)
    return delta, dtypes


@pytest.mark.numerics
def test_a_bf16_update_is_close_to_the_fp32_update_and_keeps_float32_master_weights(small_cfg, tmp_path):
    small_cfg.evaluation.enabled = False
    small_cfg.trainer.precision = "bf16"
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        ro = trainer.algorithm.rollout(0)
        ro.advantages = torch.linspace(-1.0, 1.0, len(ro.completions))  # every row pulls
        fp32, _ = _one_update(trainer, ro, "fp32")
        bf16, dtypes = _one_update(trainer, ro, "bf16")
    finally:
        trainer.close()
    assert dtypes == {torch.float32}  # parameters and AdamW moments stay float32
    # AdamW's first step moves each weight by lr * g / (|g| + eps) ~ lr * sign(g): the two updates agree
    # wherever the gradient's sign does. Stated tolerance: cosine similarity >= 0.95 over all weights and
    # no weight moved by more than lr (1e-3) plus rounding in either run.
    a = torch.cat([fp32[n].flatten() for n in fp32])
    b = torch.cat([bf16[n].flatten() for n in fp32])
    cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    assert cosine >= 0.95, cosine
    assert float(b.abs().max()) <= 1e-3 * 1.001


@pytest.mark.numerics
def test_fp16_loss_scaling_skips_a_step_with_inf_gradients_and_halves_the_scale():
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    mp = MixedPrecision("fp16", "cpu")
    scale = mp.scaler.get_scale()  # 65536 = 2^16, GradScaler's default
    # A finite step: loss = 3 * w0 + w1, gradient (3, 1) after unscaling; SGD moves w by -0.1 * (3, 1).
    mp.backward((weight * torch.tensor([3.0, 1.0])).sum())
    norm = step_optimizer(optimizer, [weight], max_norm=0.0, precision=mp)
    # |(3, 1)| of the unscaled gradient, not 65536 times it: a norm of 2 terms (tests/conftest.py's rule).
    assert_close_up_to_rounding(norm, 10 ** 0.5, terms=2)
    torch.testing.assert_close(weight.detach(), torch.tensor([0.7, 1.9]))
    assert mp.scaler.get_scale() == scale and mp.skipped_steps == 0
    # An overflowing step: inf in the gradient -> no update, S halved, counted.
    optimizer.zero_grad()
    mp.backward((weight * torch.tensor([float("inf"), 1.0])).sum())
    step_optimizer(optimizer, [weight], max_norm=1.0, precision=mp)
    torch.testing.assert_close(weight.detach(), torch.tensor([0.7, 1.9]))
    assert mp.scaler.get_scale() == scale / 2
    assert mp.metrics() == {"precision/loss_scale": scale / 2, "precision/skipped_steps": 1.0}
    # The scaler's state goes into a checkpoint and comes back.
    restored = MixedPrecision("fp16", "cpu")
    restored.load_state_dict(mp.state_dict())
    assert restored.scaler.get_scale() == scale / 2 and restored.skipped_steps == 1


def test_fp32_and_bf16_steps_need_no_loss_scale():
    assert MixedPrecision("fp32").metrics() == {} and MixedPrecision("bf16").scaler is None


def test_a_fp16_run_trains_and_logs_its_loss_scale(small_cfg, tmp_path):
    from reasoning_rl.run_folder.metrics_log import read_metrics

    small_cfg.trainer.precision = "fp16"
    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.train()
        assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(m["precision/loss_scale"] > 0 for m in metrics)


def test_the_reference_can_be_stored_in_bfloat16(small_cfg, tmp_path):
    small_cfg.evaluation.enabled = False
    small_cfg.model.reference_dtype = "bfloat16"
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.algorithm.setup(None)
        ref = trainer.algorithm.ref_model
        assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
        assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
        metrics = trainer.algorithm.update(trainer.algorithm.rollout(0))
    finally:
        trainer.close()
    # k3 KL between the policy and its bf16-rounded copy at step 0: small but not exactly 0
    assert 0 <= metrics["kl/mean"] < 1e-2


def test_engines_follow_the_compute_dtype():
    from reasoning_rl.policy.precision import mark_precision

    model, _ = build_tiny_model()
    assert sampling_dtype(model) == torch.float32
    mark_precision(model, "bf16")
    assert sampling_dtype(model) == torch.bfloat16


def test_precision_settings_that_cannot_run_are_refused(small_cfg):
    assert precision_problems("bf16") == [] and "is unknown" in precision_problems("bf8")[0]
    ppo = dataclasses.replace(small_cfg, algo=PPOConfig())
    ppo.model.dtype = "bfloat16"
    assert compat.problems(ppo) == []  # fp32 trains any dtype
    ppo.model.dtype, ppo.trainer.precision = "float32", "bf16"
    assert compat.problems(ppo) == [
        "trainer.precision=bf16 is not built into algo.name='ppo' (the grpo module and its variants have it); "
        "set trainer.precision=fp32"]
    small_cfg.trainer.precision = "bf16"
    assert compat.problems(small_cfg) == []  # grpo
    small_cfg.trainer.precision = "fp32"
    small_cfg.trainer.precision = "bf16"
    small_cfg.model.dtype = "bfloat16"
    with pytest.raises(ConfigError, match="master weights"):
        validate(small_cfg)
    small_cfg.model.dtype = "float32"
    small_cfg.trainer.precision = "fp8"
    with pytest.raises(ConfigError, match="fp32, bf16, fp16"):
        validate(small_cfg)


def test_bf16_storage_without_master_weights_warns_with_the_weights_it_freezes():
    from reasoning_rl.policy.precision import storage_rounding_warning

    # bfloat16: relative step 2^-8, so at lr 1e-6 weights above 256e-6 = 2.6e-4 never move.
    text = storage_rounding_warning("bfloat16", "fp32", 1e-6)
    assert "an update below 0.0039 of a weight rounds away" in text and "larger than 0.00026" in text
    assert "model.dtype=float32 trainer.precision=bf16" in text
    assert "larger than 0.0041" in storage_rounding_warning("float16", "fp32", 2e-6)  # 2^-11: 2e-6 * 2048
    assert storage_rounding_warning("float32", "fp32", 1e-6) is None
    assert storage_rounding_warning("bfloat16", "bf16", 1e-6) is None  # refused by validate anyway: not float32
    # The rounding itself, as the warning says: a bf16 weight of 0.01 does not move by 1e-6; by 1e-4 it does.
    w = torch.tensor(0.01, dtype=torch.bfloat16)
    assert (w + 1e-6) == w and (w + 1e-4) != w
