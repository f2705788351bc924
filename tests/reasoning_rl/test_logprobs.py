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
