"""Per-token log-probs of completions: the shared-prompt forward (each GRPO group's prompt
encoded once) gives the same log-probs and gradients as running every row in full."""

import random

import pytest
import torch

from reasoning_rl.batching import pack
from reasoning_rl.logprobs import completion_logprobs, selective_log_softmax
from reasoning_rl.models import TinyModelConfig, build_tiny_model


def _model(arch):
    return build_tiny_model(TinyModelConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))


def _groups(tok, group_size):
    """Prompts of different lengths (left padding) and completions of 1-4 tokens (right padding)."""
    rng = random.Random(0)
    prompts, completions = [], []
    for text in ("What is 3 + 4? Answer: ", "What is 13 + 14? Answer: ", "Compute 1+2: "):
        for _ in range(group_size):
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            answer = str(rng.randint(0, 999))[: rng.randint(1, 3)]
            completions.append(tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    return pack(prompts, completions, tok.pad_token_id)


def test_selective_log_softmax_matches_log_softmax_gather():
    logits = torch.randn(5, 7, 11)
    tokens = torch.randint(0, 11, (5, 7))
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, tokens, chunk_rows=2), expected)
    torch.testing.assert_close(selective_log_softmax(logits, tokens), expected)  # one chunk
    torch.testing.assert_close(selective_log_softmax(logits, tokens, chunk_elements=7 * 11 * 3), expected)  # 3 rows each


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompt_forward_equals_full_forward(arch, temperature):
    torch.manual_seed(0)
    model, tok = _model(arch)
    model.train()
    batch = _groups(tok, group_size=4)
    mask = batch.completion_mask

    def run(group_size):
        logp, entropy = completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start,
                                            temperature, with_entropy=True, group_size=group_size)
        model.zero_grad(set_to_none=True)
        ((logp * mask).sum() / mask.sum()).backward()
        return logp.detach(), entropy, [p.grad.clone() for p in model.parameters()]

    full_logp, full_entropy, full_grads = run(1)
    shared_logp, shared_entropy, shared_grads = run(4)
    on = mask.bool()
    torch.testing.assert_close(shared_logp[on], full_logp[on], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_entropy[on], full_entropy[on], atol=1e-5, rtol=1e-5)
    for shared, full in zip(shared_grads, full_grads):
        torch.testing.assert_close(shared, full, atol=1e-5, rtol=1e-4)


def test_shared_prompt_forward_refuses_rows_that_are_not_groups():
    model, tok = _model("llama")
    batch = _groups(tok, group_size=4)
    with pytest.raises(ValueError, match="share one prompt"):
        completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start, group_size=3)
    with pytest.raises(ValueError, match="groups of 5"):
        completion_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_start, group_size=5)


class _PadLogitsDown(torch.nn.Module):
    """A policy whose <pad> logit is -1e4 everywhere: log pi(<pad>) ~ -1e4 at padded positions."""

    def __init__(self, model, pad_id):
        super().__init__()
        self.model, self.pad_id = model, pad_id

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        logits = out.logits.clone()
        logits[..., self.pad_id] = -1e4
        out.logits = logits
        return out


@pytest.mark.parametrize("group_size", [1, 2])
def test_padded_positions_are_zero_whatever_the_pad_logit(group_size):
    from reasoning_rl.algo import grpo_loss

    model, tok = _model("llama")
    hostile = _PadLogitsDown(model, tok.pad_token_id)
    hostile.config = model.config
    prompts, comps = [], []
    for text, answer in (("What is 3 + 4? Answer: ", "7"), ("What is 13 + 14? Answer: ", "27")):
        for _ in range(group_size):
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            comps.append(tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    comps[-1] = comps[-1] + comps[-1]  # one longer completion: the others are right-padded
    packed = pack(prompts, comps, tok.pad_token_id)
    logp, entropy = completion_logprobs(hostile, packed.input_ids, packed.attention_mask, packed.completion_start,
                                        with_entropy=True, group_size=group_size)
    pads = packed.completion_mask == 0
    assert pads.any()
    assert (logp[pads] == 0).all() and (entropy[pads] == 0).all()
    # With beta > 0 against a zero-filled reference row the loss and its gradient stay finite.
    ref = torch.where(pads, 0.0, logp.detach() - 0.1)
    out = grpo_loss(logp, logp.detach(), ref, torch.linspace(-1, 1, packed.input_ids.shape[0]), packed.completion_mask,
                    beta=0.04, eps_low=0.2, eps_high=0.2)
    out.loss.backward()
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                            if p.grad is not None)


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (5, 1.0), (5, 0.7), (1, 1.0), (0, 0.01)])
def test_sampling_support_is_what_transformers_samples_from(top_k, top_p):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from reasoning_rl.logprobs import sampling_support

    torch.manual_seed(0)
    scores = torch.randn(6, 40) * 3
    warped = scores
    if top_k:
        warped = TopKLogitsWarper(top_k)(None, warped)
    if top_p < 1.0:
        warped = TopPLogitsWarper(top_p)(None, warped)
    assert torch.equal(sampling_support(scores, top_k, top_p), torch.isfinite(warped))


def test_truncated_sampling_log_probs_are_renormalised_over_the_support():
    # Greedy completions are always inside the top-k set. Their log-probs renormalised over the
    # k kept tokens are >= the full-softmax ones, and the entropy over the support is <= the full one.
    model, tok = _model("llama")
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("What is 3 + 4? Answer: ", "Compute 1+2: ")]
    comps = []
    with torch.no_grad():
        for p in prompts:
            out = model.generate(torch.tensor([p]), max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
            comps.append(out[0, len(p):].tolist())
    packed = pack(prompts, comps, tok.pad_token_id)
    args = (model, packed.input_ids, packed.attention_mask, packed.completion_start)
    full, entropy_full = completion_logprobs(*args, with_entropy=True)
    kept, entropy_kept = completion_logprobs(*args, with_entropy=True, top_k=8)
    real = packed.completion_mask.bool()
    assert torch.isfinite(kept[real]).all()
    assert (kept[real] >= full[real] - 1e-6).all() and (kept[real] > full[real]).any()
    assert torch.isfinite(entropy_kept).all() and (entropy_kept[real] <= entropy_full[real] + 1e-5).all()
