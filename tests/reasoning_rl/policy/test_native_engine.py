"""The native decode loop samples what `generate` samples: same greedy tokens, same per-step
distribution (the loop's next-token logits equal a full forward's), early exit, EOS handling."""

import pytest
import torch

from reasoning_rl.policy.engines import HFEngine, NativeEngine, inverse_cdf_sample, make_engine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig

PROMPTS = ["What is 3 + 4? Answer: ", "What is 13 + 14? Answer: ", "1+2="]  # different lengths: left padding


def _model(arch):
    model, tok = build_tiny_model(TinyModelConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2,
                                                  intermediate_size=64))
    return model.eval(), tok


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_greedy_tokens_equal_generate(arch):
    model, tok = _model(arch)
    sampling = SamplingConfig(max_new_tokens=12, do_sample=False)
    ours = NativeEngine(model, tok).generate(PROMPTS, 2, sampling)
    theirs = HFEngine(model, tok).generate(PROMPTS, 2, sampling)
    assert [[c.token_ids for c in g] for g in ours] == [[c.token_ids for c in g] for g in theirs]
    assert [[c.finish_reason for c in g] for g in ours] == [[c.finish_reason for c in g] for g in theirs]


def test_each_step_samples_from_the_full_forward_distribution():
    # Sampled rows, then one full forward over prompt + completion: the loop's tokens were drawn
    # from softmax(logits / T) of exactly those logits, so top-1 sampling is the full forward's argmax.
    model, tok = _model("llama")
    sampling = SamplingConfig(max_new_tokens=8, top_k=1, temperature=0.7)
    groups = NativeEngine(model, tok).generate(PROMPTS, 3, sampling, seed=0)
    for prompt, group in zip(PROMPTS, groups):
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for c in group:
            full = torch.tensor([ids + c.token_ids])
            with torch.no_grad():
                logits = model(input_ids=full).logits[0, len(ids) - 1:-1]
            assert logits.argmax(-1).tolist() == c.token_ids


def test_sampling_is_seeded_and_varies():
    model, tok = _model("llama")
    engine = make_engine("native", model, tok)
    sampling = SamplingConfig(max_new_tokens=6)
    a = engine.generate(PROMPTS, 4, sampling, seed=3)
    b = engine.generate(PROMPTS, 4, sampling, seed=3)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert len({tuple(c.token_ids) for g in a for c in g}) > 1


class _EosAfter(torch.nn.Module):
    """A policy that says EOS at its k-th new token (counting forward calls)."""

    def __init__(self, model, eos, k):
        super().__init__()
        self.model, self.eos, self.k, self.calls = model, eos, k, 0

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        self.calls += 1
        if self.calls >= self.k:
            out.logits[..., :] = -1e9
            out.logits[..., self.eos] = 0.0
        return out


def test_stops_when_every_row_has_finished():
    model, tok = _model("llama")
    policy = _EosAfter(model, tok.eos_token_id, k=3)
    policy.config = model.config
    (group,) = NativeEngine(policy, tok).generate(["1+2="], 4, SamplingConfig(max_new_tokens=50), seed=0)
    assert policy.calls == 3  # prefill + 2 steps, not 50
    assert all(c.finish_reason == "stop" and c.token_ids[-1] == tok.eos_token_id and c.num_tokens == 3
               for c in group)


def test_inverse_cdf_sampling_draws_each_token_with_its_probability_and_never_a_zero_one(monkeypatch):
    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0], [0.1, 0.0, 0.0, 0.0, 0.0, 0.9]]).repeat(20_000, 1)
    draws = inverse_cdf_sample(probs).view(20_000, 2)
    for row in (0, 1):
        freq = torch.bincount(draws[:, row], minlength=6).float() / 20_000
        assert torch.all(freq[probs[row] == 0] == 0)
        torch.testing.assert_close(freq, probs[row], atol=0.015, rtol=0)  # ~4 standard errors
    # u as close to 1 as float32 goes still draws the last token of positive probability.
    monkeypatch.setattr(torch, "rand_like", lambda t: torch.full_like(t, 1 - 2 ** -24))
    assert inverse_cdf_sample(torch.tensor([[0.25, 0.75, 0.0], [0.1, 0.2, 0.7]])).tolist() == [1, 2]
