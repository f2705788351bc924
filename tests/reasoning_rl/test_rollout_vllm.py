"""The vLLM training backend (reasoning_rl/rollout_vllm.py). On the CPU, everything around the
engine with a fake ``LLM`` that holds its own copy of the policy, as vLLM does: weight names,
in-place sync, version tags, the log-prob mismatch, sleep/wake order, timeouts, the config.
The ``gpu`` tests run the real vLLM (skipped without a GPU and the vllm extra)."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from reasoning_rl.config import RolloutConfig
from reasoning_rl.logprobs import frozen_logprobs
from reasoning_rl.models import TinyModelConfig, build_tiny_model
from reasoning_rl.rollout import HFEngine, SamplingConfig, make_engine
from reasoning_rl.rollout_vllm import (
    VLLMRolloutEngine,
    call_with_timeout,
    logprob_mismatch,
    vllm_weight_name,
    vllm_weights,
)

CONF = Path(__file__).resolve().parents[2] / "conf"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm extra")


class FakeModel:
    """What vLLM holds: its own copy of the policy, filled by ``load_weights`` (unknown names fail)."""

    def __init__(self, policy, delay: float = 0.0) -> None:
        self.policy, self.delay, self.loads = policy, delay, 0

    def load_weights(self, weights) -> None:
        time.sleep(self.delay)
        params = dict(self.policy.named_parameters())
        for name, tensor in weights:
            params[name].data.copy_(tensor)  # KeyError: a name vLLM would not know
        self.loads += 1


class FakeLLM:
    """vLLM's ``LLM`` as the engine uses it (V0 layout): generate from token-id prompts with
    ``n`` samples and per-token log-probs, sleep / wake_up, reset_prefix_cache."""

    def __init__(self, policy, tokenizer, delay: float = 0.0) -> None:
        self.model = FakeModel(copy.deepcopy(policy), delay)
        self.tokenizer, self.events = tokenizer, []
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=self.model))))

    def generate(self, prompts, params, use_tqdm=False):
        self.events.append("generate")
        sampling = SamplingConfig(temperature=params.temperature, max_new_tokens=params.max_tokens)
        texts = [self.tokenizer.decode(p["prompt_token_ids"]) for p in prompts]
        groups = HFEngine(self.model.policy, self.tokenizer).generate(texts, params.n, sampling, seed=params.seed)
        outs = []
        for p, group in zip(prompts, groups):
            lps = frozen_logprobs(self.model.policy, [p["prompt_token_ids"]] * len(group),
                                  [c.token_ids for c in group], self.tokenizer.pad_token_id, params.temperature, 8)
            outs.append(SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[
                SimpleNamespace(token_ids=c.token_ids, finish_reason=c.finish_reason,
                                logprobs=[{t: SimpleNamespace(logprob=float(x))} for t, x in zip(c.token_ids, lp)])
                for c, lp in zip(group, lps)]))
        return outs

    def sleep(self, level: int) -> None:
        self.events.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.events.append("wake")

    def reset_prefix_cache(self) -> None:
        self.events.append("reset_prefix_cache")


class FakeLLMV1(FakeLLM):
    """vLLM V1: the model is reached through ``collective_rpc`` (a callable run on each worker)."""

    def __init__(self, policy, tokenizer) -> None:
        super().__init__(policy, tokenizer)
        del self.llm_engine
        self.worker = SimpleNamespace(model_runner=SimpleNamespace(model=self.model))

    def collective_rpc(self, method, args=()):
        self.events.append("collective_rpc")
        return [method(self.worker, *args)]


def _tiny():
    torch.manual_seed(0)
    return build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64))


def _engine(llm, tokenizer, policy, **kw):
    return VLLMRolloutEngine(llm, tokenizer, policy, sampling_params=SimpleNamespace, **kw)


def _perturb(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)


# -- weight names -------------------------------------------------------------------------------------

def test_weight_names_are_the_hf_names_without_wrappers_and_tied_head():
    model, _ = _tiny()
    names = [n for n, _ in vllm_weights(model.state_dict(), tie_word_embeddings=True)]
    assert set(names) == set(model.state_dict()) - {"lm_head.weight"}  # tied: vLLM shares the embedding
    assert "lm_head.weight" in [n for n, _ in vllm_weights(model.state_dict(), tie_word_embeddings=False)]
    # (wrapped name, what vLLM expects)
    for wrapped, plain in [
        ("module.model.embed_tokens.weight", "model.embed_tokens.weight"),               # DDP
        ("_orig_mod.model.norm.weight", "model.norm.weight"),                             # torch.compile
        ("module._orig_mod.lm_head.weight", "lm_head.weight"),                            # both
        ("model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        ("_fsdp_wrapped_module.model.layers.1._fsdp_wrapped_module.self_attn.q_proj.weight",
         "model.layers.1.self_attn.q_proj.weight"),                                       # FSDP1
        ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight"),  # unchanged
    ]:
        assert vllm_weight_name(wrapped) == plain
    extra = {"model.rotary_emb.inv_freq": torch.ones(2), "model.norm.weight": torch.ones(2)}
    assert [n for n, _ in vllm_weights(extra)] == ["model.norm.weight"]  # vLLM computes rotary caches


@pytest.mark.parametrize("fake", [FakeLLM, FakeLLMV1], ids=["v0_driver_worker", "v1_collective_rpc"])
def test_sync_loads_every_weight_in_place_and_tags_the_version(fake):
    policy, tok = _tiny()
    llm = fake(policy, tok)
    _perturb(llm.model.policy)  # the engine starts out of date
    engine = _engine(llm, tok, policy, sleep_mode=True)
    engine.update_policy(policy, version=3)
    for (name, a), b in zip(policy.named_parameters(), llm.model.policy.parameters()):
        assert torch.equal(a, b), name
    assert engine.policy_version == 3 and "time/weight_sync" in engine.pop_metrics()
    groups = engine.generate(["1+2="], 3, SamplingConfig(max_new_tokens=4), seed=0)
    assert len(groups) == 1 and len(groups[0]) == 3
    assert {c.policy_version for c in groups[0]} == {3}
    assert groups[0][0].prompt_token_ids == tok("1+2=", add_special_tokens=False)["input_ids"]


def test_mismatch_is_large_with_stale_weights_and_zero_after_the_sync_and_sleep_order():
    policy, tok = _tiny()
    llm = FakeLLM(policy, tok)
    _perturb(llm.model.policy)
    engine = _engine(llm, tok, policy, sleep_mode=True, sleep_level=1)
    sampling = SamplingConfig(temperature=0.7, max_new_tokens=5)
    engine.generate(["3+4=", "5+6="], 4, sampling, seed=1)
    stale = engine.pop_metrics()
    assert stale["rollout/logprob_mismatch_mean"] > 0.05
    engine.update_policy(policy, version=1)
    engine.pop_metrics()
    engine.generate(["3+4=", "5+6="], 4, sampling, seed=1)
    synced = engine.pop_metrics()
    assert synced["rollout/logprob_mismatch_max"] < 1e-4  # same weights, same temperature: the same numbers
    # generate then sleep (the update gets the memory); wake before loading; the prefix cache is reset
    assert llm.events == ["generate", "sleep1", "wake", "reset_prefix_cache", "generate", "sleep1"]


def test_sleep_level_2_reloads_the_weights_on_wake():
    policy, tok = _tiny()
    llm = FakeLLM(policy, tok)
    engine = _engine(llm, tok, policy, sleep_mode=True, sleep_level=2)
    engine.generate(["1+1="], 2, SamplingConfig(max_new_tokens=2))
    engine.generate(["1+1="], 2, SamplingConfig(max_new_tokens=2))
    assert llm.model.loads == 1 and llm.events.count("sleep2") == 2


def test_a_sync_that_hangs_fails_loudly_naming_the_setting():
    policy, tok = _tiny()
    engine = _engine(FakeLLM(policy, tok, delay=5.0), tok, policy, sync_timeout=0.2)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"rollout\.vllm_sync_timeout"):
        engine.update_policy(policy, version=1)
    assert time.perf_counter() - t0 < 2.0
    assert engine.policy_version == 0  # not claimed as synced


def test_call_with_timeout_returns_results_and_reraises_errors():
    assert call_with_timeout(lambda: 41 + 1, 1.0, "adding", "x.timeout") == 42
    with pytest.raises(KeyError, match="nope"):
        call_with_timeout(lambda: {}["nope"], 1.0, "a lookup", "x.timeout")


def test_logprob_mismatch_by_hand():
    # |[-1, -2] - [-1.5, -2]| = [0.5, 0], |[-3] - [-2]| = [1]  ->  mean 0.5, max 1
    out = logprob_mismatch([[-1.0, -2.0], [-3.0]], [torch.tensor([-1.5, -2.0]), torch.tensor([-2.0])])
    assert out == {"rollout/logprob_mismatch_mean": pytest.approx(0.5), "rollout/logprob_mismatch_max": 1.0}


def test_sampling_settings_map_to_vllm_params():
    policy, tok = _tiny()
    engine = _engine(FakeLLM(policy, tok), tok, policy)
    sampled = engine.sampling_params(8, SamplingConfig(temperature=0.6, top_p=0.9, top_k=0, max_new_tokens=7), 5)
    assert (sampled["n"], sampled["temperature"], sampled["top_p"], sampled["top_k"], sampled["max_tokens"],
            sampled["seed"], sampled["logprobs"]) == (8, 0.6, 0.9, -1, 7, 5, 0)
    greedy = engine.sampling_params(1, SamplingConfig(do_sample=False, temperature=0.6), None)
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == -1


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_without_vllm_the_backend_says_how_to_install():
    policy, tok = _tiny()
    with pytest.raises(ImportError, match=r"rollout\.backend=vllm needs the vllm extra.*pip install 'reasoning-rl\[vllm\]' on a GPU machine"):
        make_engine("vllm", policy, tok, rollout=RolloutConfig(backend="vllm"), workdir="/tmp/unused")


def test_vllm_yaml_equals_the_schema_defaults_but_the_backend():
    values = yaml.safe_load((CONF / "rollout" / "vllm.yaml").read_text())
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(RolloutConfig)}
    assert set(defaults) == set(values)
    assert {k: v for k, v in values.items() if v != defaults[k]} == {"backend": "vllm"}


def test_training_with_the_fake_vllm_engine_logs_versions_and_a_zero_mismatch(small_cfg, tmp_path):
    """The run loop drives the engine: sync after every step, versions in metrics and completions."""
    import json

    from reasoning_rl.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    small_cfg.rollout.temperature = 1.0
    trainer = Trainer(small_cfg, tmp_path / "run")
    llm = FakeLLM(trainer.model, trainer.tokenizer)
    _perturb(llm.model.policy)  # only the sync before step 1 can make it right
    trainer.engine = trainer.context.engine = _engine(llm, trainer.tokenizer, trainer.model, sleep_mode=True)
    try:
        trainer.train()
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["rollout/policy_version"] for m in metrics] == [0, 1]
    assert all(m["rollout/logprob_mismatch_max"] < 1e-4 and m["time/weight_sync"] >= 0 for m in metrics)
    assert llm.model.loads == 3  # at setup, after step 1, after step 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert sorted({r["policy_version"] for r in rows}) == [0, 1]


# -- on a GPU with vLLM --------------------------------------------------------------------------------

def _gpu_tiny(tmp_path):
    # head_dim 64: a size vLLM's attention kernels take
    model, tok = build_tiny_model(TinyModelConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256))
    return model.cuda(), tok


@pytest.mark.gpu
@needs_vllm
def test_real_vllm_engine_takes_new_weights_in_place(tmp_path):
    policy, tok = _gpu_tiny(tmp_path)
    cfg = RolloutConfig(backend="vllm", vllm_gpu_memory_utilization=0.2, vllm_enforce_eager=True, vllm_max_model_len=256)
    engine = VLLMRolloutEngine.colocated(policy, tok, cfg, tmp_path / "vllm")
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=8)
    groups = engine.generate(["12+3="] * 2, 4, sampling, seed=0)
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)
    before = engine.pop_metrics()["rollout/logprob_mismatch_mean"]
    _perturb(policy)  # the trainer moved on; the engine has not
    engine.generate(["12+3="] * 2, 4, sampling, seed=0)
    stale = engine.pop_metrics()["rollout/logprob_mismatch_mean"]
    engine.update_policy(policy, version=1)
    groups = engine.generate(["12+3="] * 2, 4, sampling, seed=0)
    synced = engine.pop_metrics()["rollout/logprob_mismatch_mean"]
    assert {c.policy_version for g in groups for c in g} == {1}
    assert before < 0.05 and synced < 0.05 < stale, (before, stale, synced)


@pytest.mark.gpu
@needs_vllm
def test_real_vllm_training_run(small_cfg, tmp_path):
    from reasoning_rl.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.model.tiny = TinyModelConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256)
    small_cfg.model.device = "cuda"
    small_cfg.rollout.backend = "vllm"
    small_cfg.rollout.vllm_gpu_memory_utilization = 0.2
    small_cfg.rollout.vllm_enforce_eager = True
    small_cfg.rollout.vllm_max_model_len = 256
    small_cfg.trainer.steps = 2
    trainer = Trainer(small_cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["rollout/policy_version"] for m in metrics] == [0, 1]
    assert all(m["rollout/logprob_mismatch_mean"] < 0.05 for m in metrics)


# -- reasoning-rl-bench gpu: the parts a CPU can run ------------------------------------------------

def test_gpu_bench_runs_its_training_path_on_the_cpu(tmp_path):
    from benchmarks.bench import main

    path = tmp_path / "bench.jsonl"
    assert main(["gpu", "--device", "cpu", "--backend", "auto", "--hidden", "64", "--layers", "1", "--steps", "2",
                 "--prompts-per-step", "2", "--group", "2", "--max-new", "3", "--results", str(path)]) == 0
    record = json.loads(path.read_text().splitlines()[-1])
    figures = record["figures"]
    assert figures["backend"] == "hf" and figures["steps"] == 2 and figures["policy_versions"] == [0, 1]
    assert figures["generation_tokens_per_s"] > 0 and figures["step_s_median"] > 0


def test_gpu_bench_figures_by_hand():
    from benchmarks.perf.gpu_smoke import figures_of, resolve_backend

    rows = [{"completion/tokens": 100, "time/generate": 0.5, "time/step": 1.0, "rollout/policy_version": 0},
            {"completion/tokens": 300, "time/generate": 1.5, "time/step": 3.0, "rollout/policy_version": 1,
             "time/weight_sync": 0.2, "rollout/logprob_mismatch_mean": 0.01}]
    out = figures_of(rows, "vllm")
    assert out["generation_tokens_per_s"] == pytest.approx(200.0)  # 400 tokens / 2 s
    assert out["step_s_median"] == 2.0 and out["weight_sync_s_mean"] == 0.2
    assert out["logprob_mismatch_mean_last"] == 0.01 and out["policy_versions"] == [0, 1]
    assert resolve_backend("auto", "cpu") == "hf" and resolve_backend("vllm", "cpu") == "vllm"
