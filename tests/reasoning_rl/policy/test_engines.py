"""Completion.logprobs of the hf and native engines: the log-prob of each drawn token under the
distribution it was drawn from (temperature, top-k, top-p), as the trainer computes it; greedy:
under the temperature-1 distribution."""

import pytest
import torch

from reasoning_rl.policy.engines import HFEngine, NativeEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.logprobs import frozen_logprobs
from reasoning_rl.policy.runtime import decide_runtime, set_runtime
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms

pytestmark = pytest.mark.numerics

PROMPTS = ["What is 3 + 4? Answer: ", "Compute 13 + 14. Answer: "]
ENGINES = {
    "hf": lambda m, t: HFEngine(m, t),
    "native-lean": lambda m, t: NativeEngine(m, t),
    "native-modules": lambda m, t: NativeEngine(m, t, lean=False),
}


def _model(runtime="lean"):
    model, tok = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))
    set_runtime(model, decide_runtime(model, runtime))
    return model, tok


def _assert_same_logprobs(completion, want, model):
    """The sampler's log-probs of its tokens are the trainer's, up to rounding (tests/conftest.py's rule): one
    decoder chain over a prompt of at most 25 tokens and at most 24 new ones, under 64 positions."""
    assert_close_up_to_rounding(torch.tensor(completion.logprobs), want, terms=decoder_terms(model.config, 64))


def _trainer_logprobs(model, tok, groups, sampling):
    rows = [c for g in groups for c in g]
    return frozen_logprobs(model, [c.prompt_token_ids for c in rows], [c.token_ids for c in rows],
                           tok.pad_token_id, sampling.temperature if sampling.do_sample else 1.0, micro_batch=64,
                           top_k=sampling.top_k if sampling.do_sample else 0,
                           top_p=sampling.top_p if sampling.do_sample else 1.0)


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("sampling", [
    SamplingConfig(max_new_tokens=12),
    SamplingConfig(max_new_tokens=12, temperature=0.7, top_k=5),
    SamplingConfig(max_new_tokens=12, temperature=1.3, top_p=0.8),
    SamplingConfig(max_new_tokens=12, do_sample=False),  # greedy: the temperature-1 distribution
], ids=["t1", "t0.7-k5", "t1.3-p0.8", "greedy"])
def test_each_drawn_token_carries_its_log_prob_under_the_sampled_distribution(engine, sampling):
    model, tok = _model()
    groups = ENGINES[engine](model, tok).generate(PROMPTS, 4, sampling, seed=0)
    trainer = _trainer_logprobs(model, tok, groups, sampling)
    rows = [c for g in groups for c in g]
    for completion, want in zip(rows, trainer):
        assert len(completion.logprobs) == len(completion.token_ids)
        assert all(lp <= 0 for lp in completion.logprobs)
        if completion.finish_reason == "length":  # no EOS: every position was sampled, none dropped
            assert completion.num_tokens == sampling.max_new_tokens
        _assert_same_logprobs(completion, want, model)
    assert len(rows) == len(trainer) == 4 * len(PROMPTS)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_sampled_pad_token_reaches_the_trainer_as_sampled(engine):
    """The untrained model draws <pad> now and then: it is a sampled token like any other, kept in
    place, so the trainer scores the context the sampler saw (dropping it made the two differ)."""
    model, tok = _model()
    sampling = SamplingConfig(max_new_tokens=24)
    groups = ENGINES[engine](model, tok).generate(PROMPTS * 4, 8, sampling, seed=0)
    rows = [c for g in groups for c in g]
    with_pad = [c for c in rows if tok.pad_token_id in c.token_ids and c.token_ids[-1] != tok.pad_token_id]
    assert with_pad, "no row drew <pad> before its end; pick another seed"
    trainer = _trainer_logprobs(model, tok, groups, sampling)
    for completion, want in zip(rows, trainer):
        _assert_same_logprobs(completion, want, model)


@pytest.mark.parametrize("engine", ["hf", "native-lean"])
def test_log_probs_are_cut_with_the_tokens_at_a_stop_string(engine):
    model, tok = _model()
    sampling = SamplingConfig(max_new_tokens=16, stop=["1", "2", "3", "a", "e", " "])
    groups = ENGINES[engine](model, tok).generate(PROMPTS, 4, sampling, seed=1)
    rows = [c for g in groups for c in g]
    assert any(c.finish_reason == "stop" for c in rows)
    trainer = _trainer_logprobs(model, tok, groups, sampling)
    for completion, want in zip(rows, trainer):
        assert len(completion.logprobs) == len(completion.token_ids)
        if completion.finish_reason == "stop":
            _assert_same_logprobs(completion, want, model)
