"""The chunked LM head: log-probs, entropy and gradients equal to ``log_softmax(h W^T + b)`` computed
whole, for any chunk size, temperature and sampling support; float32 logsumexp for bfloat16 inputs."""

import math

import pytest
import torch

from reasoning_rl.policy.lm_head import (
    AUTO_CHUNK_LOGITS,
    AUTO_MIN_VOCAB,
    LMHeadChunkError,
    resolve_chunk,
    sampling_support,
    token_logprobs,
)
from tests.conftest import assert_close_up_to_rounding

pytestmark = pytest.mark.numerics


def _terms(n, d, v):
    """Terms along the longest chain (tests/conftest.py's rule): the logits' width d, the softmax over v,
    then the gradient's sum over the n rows (dW) or the v logits (dh)."""
    return d + v + max(n, v)


def _reference(hidden, weight, bias, targets, temperature, top_k=0, top_p=1.0):
    """Autograd's graph over the full [N, V] logits: what the chunked function must equal."""
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature  # [N, V]
    if top_k or top_p < 1.0:
        logits = logits.masked_fill(~sampling_support(logits.detach(), top_k, top_p), float("-inf"))
    logp = logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)  # [N]
    probs = logits.detach().softmax(-1)
    entropy = -torch.where(probs > 0, probs * probs.log(), 0.0).sum(-1)  # -sum p log p
    return logp, entropy


def _inputs(n=7, d=5, v=11, bias=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=gen, requires_grad=True)
    weight = torch.randn(v, d, generator=gen, requires_grad=True)
    b = torch.randn(v, generator=gen, requires_grad=True) if bias else None
    targets = torch.randint(0, v, (n,), generator=gen)
    upstream = torch.randn(n, generator=gen)  # dLoss/dlogp: a loss that weighs positions differently
    return hidden, weight, b, targets, upstream


def _grads(fn, hidden, weight, bias, upstream):
    params = [t for t in (hidden, weight, bias) if t is not None]
    for t in params:
        t.grad = None
    logp, entropy = fn()
    (logp * upstream).sum().backward()
    return logp.detach(), entropy, [t.grad.clone() for t in params]


@pytest.mark.parametrize("chunk", [1, 3, 7, 100])  # one position, uneven chunks, exactly N, more than N
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("bias", [True, False])
def test_values_entropy_and_gradients_equal_the_full_log_softmax(chunk, temperature, bias):
    hidden, weight, b, targets, upstream = _inputs(bias=bias)
    got, got_entropy, got_grads = _grads(
        lambda: token_logprobs(hidden, weight, b, targets, temperature, chunk=chunk, with_entropy=True),
        hidden, weight, b, upstream)
    want, want_entropy, want_grads = _grads(lambda: _reference(hidden, weight, b, targets, temperature),
                                            hidden, weight, b, upstream)
    terms = _terms(7, 5, 11)
    assert_close_up_to_rounding(got, want, terms=terms)
    assert_close_up_to_rounding(got_entropy, want_entropy, terms=terms)
    for g, w in zip(got_grads, want_grads):
        assert_close_up_to_rounding(g, w, terms=terms)


def test_hand_worked_two_token_vocabulary():
    # h = [1], W = [[ln 3], [0]], no bias: logits [ln 3, 0], softmax [3/4, 1/4].
    # Target 0: logp = ln(3/4); target 1: ln(1/4). Entropy -(3/4 ln 3/4 + 1/4 ln 1/4) for both.
    # dlogp_0/dW = (onehot(0) - p) h = [1/4, -1/4]; dlogp_1/dW = [-3/4, 3/4]; summed: [-1/2, 1/2].
    hidden = torch.ones(2, 1, requires_grad=True)
    weight = torch.tensor([[math.log(3.0)], [0.0]], requires_grad=True)
    logp, entropy = token_logprobs(hidden, weight, None, torch.tensor([0, 1]), chunk=1, with_entropy=True)
    # Against the exact values: a two-logit softmax, then the gradients' sums over two rows (4 terms).
    assert_close_up_to_rounding(logp, torch.tensor([math.log(0.75), math.log(0.25)]), terms=4)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert_close_up_to_rounding(entropy, torch.tensor([h, h]), terms=4)
    logp.sum().backward()
    assert_close_up_to_rounding(weight.grad, torch.tensor([[-0.5], [0.5]]), terms=4)
    # dlogp/dh = (onehot(y) - p) . W: target 0: (1/4) ln 3; target 1: -(3/4) ln 3.
    assert_close_up_to_rounding(hidden.grad, torch.tensor([[0.25 * math.log(3.0)], [-0.75 * math.log(3.0)]]), terms=4)


@pytest.mark.parametrize(("top_k", "top_p"), [(4, 1.0), (0, 0.8), (5, 0.7)])
def test_sampling_support_renormalises_inside_each_chunk(top_k, top_p):
    hidden, weight, b, targets, upstream = _inputs(n=9, v=13, seed=1)
    # Targets inside the support (what the sampler drew): the most likely token of each row.
    with torch.no_grad():
        targets = torch.nn.functional.linear(hidden, weight, b).argmax(-1)
    got, got_entropy, got_grads = _grads(
        lambda: token_logprobs(hidden, weight, b, targets, 0.8, chunk=4, with_entropy=True, top_k=top_k, top_p=top_p),
        hidden, weight, b, upstream)
    want, want_entropy, want_grads = _grads(lambda: _reference(hidden, weight, b, targets, 0.8, top_k, top_p),
                                            hidden, weight, b, upstream)
    terms = _terms(9, 5, 13)
    assert_close_up_to_rounding(got, want, terms=terms)
    # lse - sum p z against -sum p log p: two formulas, each a sum over the v logits after the logits' d.
    assert_close_up_to_rounding(got_entropy, want_entropy, terms=terms)
    for g, w in zip(got_grads, want_grads):
        assert_close_up_to_rounding(g, w, terms=terms)


def test_bfloat16_inputs_get_a_float32_logsumexp():
    # The logits are the bf16 matmul's; everything after it (logsumexp, the gather) runs in float32,
    # so the result is the float32 log-softmax of those bf16 logits, not a bf16-rounded one.
    hidden, weight, _, targets, _ = _inputs(n=6, d=8, v=300, bias=False, seed=2)
    h16, w16 = hidden.detach().bfloat16().requires_grad_(), weight.detach().bfloat16().requires_grad_()
    logp, _ = token_logprobs(h16, w16, None, targets, chunk=4)
    assert logp.dtype == torch.float32
    logits32 = torch.nn.functional.linear(h16, w16).float()  # the same bf16 products, then float32
    want = logits32.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    # The same bf16 logits on both sides; from them on float32: the logsumexp over v = 300 logits.
    # (Rounded to bf16 instead, the log-probs would be off by about eps(bf16) * |logp| ~ 4e-2.)
    assert_close_up_to_rounding(logp, want.detach(), terms=300, dtype=torch.float32)
    logp.sum().backward()
    assert h16.grad.dtype == torch.bfloat16 and w16.grad.dtype == torch.bfloat16
    assert torch.isfinite(w16.grad.float()).all()


def test_without_entropy_returns_none_and_no_grad_is_asked_of_frozen_weights():
    hidden, weight, _, targets, _ = _inputs(bias=False)
    weight.requires_grad_(False)
    logp, entropy = token_logprobs(hidden, weight, None, targets, chunk=2)
    assert entropy is None
    logp.sum().backward()
    assert weight.grad is None and hidden.grad is not None


@pytest.mark.parametrize(("setting", "vocab", "expected"), [
    ("auto", 100, 0),  # the tiny model's characters: off
    ("auto", AUTO_MIN_VOCAB - 1, 0),
    ("auto", AUTO_MIN_VOCAB, AUTO_CHUNK_LOGITS // AUTO_MIN_VOCAB),
    ("auto", 49152, 682),  # SmolLM2: 2^25 / 49,152 = 682.7
    ("auto", 151936, 220),  # Qwen2.5
    ("0", 49152, 0),
    (0, 49152, 0),
    (512, 100, 512),
    ("256", 49152, 256),
])
def test_resolve_chunk(setting, vocab, expected):
    assert resolve_chunk(setting, vocab) == expected


@pytest.mark.parametrize("setting", ["big", "-1", "1.5"])
def test_resolve_chunk_names_the_bad_setting(setting):
    with pytest.raises(LMHeadChunkError, match=r"model.lm_head_chunk=.*auto, 0 or a number"):
        resolve_chunk(setting, 49152)


def test_load_model_records_the_chunk_and_turns_checkpointing_on(caplog):
    from reasoning_rl.policy.lm_head import chunk_of
    from reasoning_rl.policy.loading import load_model
    from reasoning_rl.policy.logprobs import checkpointing_enabled
    from reasoning_rl.settings.model import ModelConfig, TinyModelConfig

    tiny = TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    with caplog.at_level("INFO", logger="reasoning_rl.policy.loading"):
        model, _ = load_model(ModelConfig(tiny=tiny, lm_head_chunk="16", gradient_checkpointing=True, device="cpu"))
    assert chunk_of(model) == 16 and checkpointing_enabled(model)
    assert "LM head: 16 positions a chunk (set); gradient checkpointing on" in caplog.text
    model, _ = load_model(ModelConfig(tiny=tiny, device="cpu"))
    assert chunk_of(model) == 0 and not checkpointing_enabled(model)  # auto: the 100-character vocabulary
    with pytest.raises(LMHeadChunkError, match="lm_head_chunk='sixteen'"):
        load_model(ModelConfig(tiny=tiny, lm_head_chunk="sixteen", device="cpu"))
