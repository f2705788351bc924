"""kl/base_forward: KL(pi_0 || pi) per token on completions sampled once from pi_0 (reasoning_rl.evaluation.kl_to_base)."""

import copy
import math

import pytest
import torch

from reasoning_rl.evaluation.kl_to_base import BaseProbe, forward_kl, sample_probe
from reasoning_rl.policy.engines import HFEngine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import _train

PROMPTS = ["What is 3 + 4? Answer: ", "What is 13 + 14? Answer: ", "Compute 1+2: ", "What is 7 * 8? Answer: "]


def _probe(temperature=1.0):
    torch.manual_seed(0)
    model, tok = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=5)
    probe = sample_probe(model, HFEngine(model, tok, batch_size=8), PROMPTS, num_prompts=3, samples=2,
                         sampling=sampling, pad_token_id=tok.pad_token_id, seed=1, micro_batch=4)
    return model, tok, sampling, probe


def _token_logprobs(model, prompt, completion, temperature):
    """log pi(y_t | x, y_<t) from one plain forward over prompt + completion (no padding, no packing)."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature  # [|y|, V]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]  # [|y|]


@pytest.mark.numerics
def test_probe_holds_samples_of_pi0_and_their_logprobs():
    model, _, sampling, probe = _probe()
    assert len(probe.completions) == 3 * 2  # 3 of the 4 prompts, 2 samples each
    assert probe.num_tokens > 0
    for prompt, completion, base in zip(probe.prompts, probe.completions, probe.base_logprobs):
        with torch.no_grad():
            expected = _token_logprobs(model, prompt, completion, sampling.temperature)
        assert_close_up_to_rounding(torch.tensor(base), expected, terms=decoder_terms(model.config, 64))  # < 64 positions


@pytest.mark.numerics
def test_kl_is_zero_for_pi0_and_matches_a_direct_computation_for_a_perturbed_model():
    model, tok, sampling, probe = _probe(temperature=0.7)
    assert forward_kl(model, probe, tok.pad_token_id, sampling, micro_batch=4) == 0.0  # pi == pi_0: same numbers
    moved = copy.deepcopy(model)
    with torch.no_grad():
        torch.manual_seed(3)
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p))
    # Independently: sum over every probe token of log pi_0(y_t) - log pi(y_t), divided by the token count.
    with torch.no_grad():
        total = sum(float((_token_logprobs(model, x, y, 0.7) - _token_logprobs(moved, x, y, 0.7)).sum())
                    for x, y in zip(probe.prompts, probe.completions))
    expected = total / sum(len(y) for y in probe.completions)
    got = forward_kl(moved, probe, tok.pad_token_id, sampling, micro_batch=4)
    # A mean of differences of log-probs: the decoder's chain, then the sum over the probe's tokens; the scale
    # is the log-probs' own (about log V), not the small KL they leave.
    assert_close_up_to_rounding(got, expected, terms=decoder_terms(model.config, 64) + probe.num_tokens,
                                scale=math.log(model.config.vocab_size))
    assert got != 0.0


def test_probe_round_trips_through_its_file(tmp_path):
    probe = BaseProbe(prompts=[[1, 2]], completions=[[3, 4, 5]], base_logprobs=[[-0.5, -1.0, -2.0]])
    probe.save(tmp_path / "probe.json")
    assert BaseProbe.load(tmp_path / "probe.json") == probe
    assert math.isnan(forward_kl(None, BaseProbe([], [], []), 0, SamplingConfig()))  # no token: NaN, no forward


@pytest.mark.numerics
def test_training_logs_kl_to_base_every_n_steps_without_changing_the_run(small_cfg, tmp_path):
    small_cfg.evaluation.enabled = False
    _train(small_cfg, tmp_path / "plain")
    plain = read_metrics(tmp_path / "plain" / "metrics.jsonl")
    small_cfg.evaluation.kl_to_base_every = 2
    small_cfg.evaluation.kl_to_base_prompts = 2
    small_cfg.evaluation.kl_to_base_samples = 2
    _train(small_cfg, tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics if "kl/base_forward" in m] == [2, 4]
    assert all(math.isfinite(m["kl/base_forward"]) for m in metrics if "kl/base_forward" in m)
    probe = BaseProbe.load(tmp_path / "run" / "kl_base_probe.json")
    assert len(probe.completions) == 2 * 2
    # Measuring changes nothing the run does: the same rollouts and updates with the probe as without.
    for a, b in zip(plain, metrics):
        for key in ("reward/mean", "loss/total", "kl/mean", "completion/length_mean"):
            assert a[key] == b[key], (a["step"], key)


@pytest.mark.numerics
def test_resumed_run_measures_against_the_saved_probe(small_cfg, tmp_path):
    small_cfg.evaluation.enabled = False
    small_cfg.evaluation.kl_to_base_every = 2
    small_cfg.evaluation.kl_to_base_prompts = 2
    small_cfg.evaluation.kl_to_base_samples = 2
    _train(small_cfg, tmp_path / "run")
    saved = (tmp_path / "run" / "kl_base_probe.json").read_text()
    small_cfg.trainer.resume = True
    small_cfg.trainer.steps = 6
    _train(small_cfg, tmp_path / "run")
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics if "kl/base_forward" in m] == [2, 4, 6]
    assert (tmp_path / "run" / "kl_base_probe.json").read_text() == saved  # pi_0 stays the first start's
