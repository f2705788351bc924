"""rollout.max_staleness: a generator process samples step s with the weights of version max(0, s - k)."""

import json
import os
import signal
import time

import pytest
import torch

from reasoning_rl.algo.batch import ReferenceJob, reference_rows
from reasoning_rl.async_checks import reference_refusal
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.policy.loading import load_model
from reasoning_rl.rollouts.async_engine import (
    AsyncEngine,
    GeneratorError,
    PrescoredReward,
    Request,
    Scored,
    pack_state,
    unpack_state,
)
from reasoning_rl.rollouts.prompt_sampler import PromptSampler
from reasoning_rl.rollouts.sampling import SamplingConfig
from reasoning_rl.run_folder.checkpoint import load_trainer_state
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.validation import validate
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import _train, tiny_config
from tests.reasoning_rl.documented_metrics import METRICS_DOC, undocumented


def _learning_config(steps: int = 4):
    """The tiny model on a reward that varies within groups ("has a digit"), so the weights move every step
    and a sampler one version behind samples differently from one that is not."""
    from rewards.specs import RewardSpec

    cfg = tiny_config(steps=steps)
    cfg.task.rewards = [RewardSpec(name="format", options={"pattern": "[0-9]"})]
    cfg.rollout.backend = "native"
    cfg.warmstart.enabled = False
    return cfg


def _one_version_behind(cfg, how: str) -> None:
    """Step s samples with the weights of version s - 1: a generator process ("async", rollout.max_staleness=1)
    or the trainer itself holding the old weights ("stale", rollout.inject.stale=1)."""
    if how == "async":
        cfg.rollout.max_staleness = 1
    else:
        cfg.rollout.inject.stale = 1


def _completions(run_dir):
    return [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]


def test_pack_state_round_trips_a_state_dict_in_one_buffer_per_dtype():
    state = {"w": torch.arange(6.0).view(2, 3), "b": torch.tensor([7.0]), "ids": torch.tensor([1, 2])}
    buffers, layout = pack_state(state)
    assert {d: b.numel() for d, b in buffers.items()} == {torch.float32: 7, torch.int64: 2}
    back = unpack_state(buffers, layout)
    assert all(torch.equal(back[k], v) for k, v in state.items())
    state["w"].add_(1.0)  # a copy: the trainer's later updates do not reach a version already sent
    assert back["w"][0, 0] == 0.0
    tied = torch.ones(2, 2)
    buffers, layout = pack_state({"embed": tied, "head": tied})  # tied weights: stored once
    assert buffers[torch.float32].numel() == 4 and torch.equal(unpack_state(buffers, layout)["head"], tied)


def test_upcoming_prompts_are_the_next_steps_and_do_not_advance_the_sampler():
    sampler = PromptSampler(5, seed=3)
    sampler.next_global(4)
    ahead = sampler.upcoming(2, 3)  # crosses the epoch boundary
    assert sampler.state_dict() == {"epoch": 0, "position": 4}
    assert ahead == [sampler.next_global(2) for _ in range(3)]


def test_settings_it_cannot_run_are_refused_in_one_message():
    for change, expected in [
        (lambda c: setattr(c.rollout, "backend", "vllm"), "rollout.backend=hf or native"),
        (lambda c: setattr(c.rollout.inject, "stale", 1), "rollout.inject.stale=k is the synchronous equivalent"),
        (lambda c: setattr(c.trainer, "fsdp", True), "trainer.fsdp=true is not supported"),
        (lambda c: setattr(c.algo.dynamic_sampling, "enabled", True), "algo.dynamic_sampling.enabled=true"),
        (lambda c: setattr(c.task, "env", "python_tool"), "task.env='python_tool' is not supported"),
    ]:
        cfg = tiny_config()
        cfg.rollout.max_staleness = 1
        change(cfg)
        with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
            validate(cfg)
    cfg = tiny_config()
    cfg.rollout.max_staleness = -1
    with pytest.raises(ConfigError, match=r"rollout\.max_staleness"):
        validate(cfg)


def test_an_algorithm_that_does_not_sample_with_the_policy_is_refused():
    from reasoning_rl.algo.sft import SFTConfig

    cfg = tiny_config()
    cfg.algo = SFTConfig(name="sft", variant="sft")
    cfg.rollout.max_staleness = 1
    with pytest.raises(ConfigError, match=r"algo\.name='sft': its step does not sample once"):
        validate(cfg)


@pytest.mark.numerics
def test_async_k1_samples_what_the_synchronous_stale_run_samples(tmp_path):
    """Same seed: the generator process with k = 1 and rollout.inject.stale=1 in the trainer draw the same
    completions, rewards and metrics (one thread each), and step s samples with version max(0, s - 1)."""
    runs = {}
    for name in ("async", "stale"):
        cfg = _learning_config()
        cfg.trainer.save_every = 0
        _one_version_behind(cfg, name)
        _train(cfg, tmp_path / name)
        runs[name] = read_metrics(tmp_path / name / "metrics.jsonl"), _completions(tmp_path / name)
    (m_async, c_async), (m_stale, c_stale) = runs["async"], runs["stale"]
    assert undocumented(m_async[1]) == [], f"document these in {METRICS_DOC}"
    assert [m["rollout/policy_version"] for m in m_async] == [0, 0, 1, 2]
    assert [m["mismatch/staleness_max"] for m in m_async] == [0.0, 1.0, 1.0, 1.0]
    assert any(m["advantage/abs_mean"] > 0 for m in m_async)  # the weights moved: staleness changes samples
    assert all(m["time/generator_busy"] > 0 and m["time/weight_sync"] >= 0 for m in m_async)
    # The work moved (tiny_config: beta 0.04): the generator sampled, computed the reference log-probs in the
    # update's micro-batches (bit-identical here: one thread on both sides) and scored the rewards.
    assert all(m["time/generator_reference"] > 0 and m["time/generator_reward"] > 0 for m in m_async)
    assert [(r["completion"], r["reward"], r["policy_version"]) for r in c_async] == \
        [(r["completion"], r["reward"], r["policy_version"]) for r in c_stale]
    for a, b in zip(m_async, m_stale):
        for key, value in b.items():
            if not key.startswith(("time/", "throughput/")):
                assert a[key] == value, (b["step"], key)


def test_ppo_runs_asynchronously_with_the_stale_runs_samples(tmp_path):
    """PPO (group size 1) goes through the same requests: k = 1 matches rollout.inject.stale=1 too."""
    from reasoning_rl.algo.ppo import PPOConfig
    from reasoning_rl.config import TrainConfig

    rows = {}
    for name in ("async", "stale"):
        base = _learning_config(steps=3)
        cfg = TrainConfig(task=base.task, model=base.model, rollout=base.rollout, trainer=base.trainer,
                          evaluation=base.evaluation, warmstart=base.warmstart,
                          algo=PPOConfig(prompts_per_step=4, group_size=1, micro_batch_size=3, learning_rate=1e-3))
        cfg.trainer.save_every = 0
        cfg.evaluation.enabled = False
        _one_version_behind(cfg, name)
        _train(cfg, tmp_path / name)
        rows[name] = [(r["completion"], r["reward"], r["policy_version"]) for r in _completions(tmp_path / name)]
    assert [v for _, _, v in rows["async"][::4]] == [0, 0, 1]
    assert rows["async"] == rows["stale"]
    # PPO computes its reference log-probs in its own rollout (no generator_reference): the generator scores only.
    metrics = read_metrics(tmp_path / "async" / "metrics.jsonl")
    assert all("time/generator_reward" in m and "time/generator_reference" not in m for m in metrics)


def test_which_reference_the_generator_computes_is_one_rule():
    """The generator computes log pi_ref only of one frozen reference model: never with beta 0, a reference
    reset during the run, or LoRA (the base with its adapter off); the update does then."""
    cfg = tiny_config()
    assert reference_refusal(cfg) == "rollout.max_staleness=0: no generator process"
    cfg.rollout.max_staleness = 1
    assert reference_refusal(cfg) is None  # tiny_config: GRPO, beta 0.04
    for change, expected in [
        (lambda c: setattr(c.algo.kl, "beta", 0.0), "algo.kl.beta=0"),
        (lambda c: setattr(c.algo.kl, "ref_reset_every", 2), "algo.kl.ref_reset_every > 0"),
        (lambda c: setattr(c.model.lora, "r", 8), "model.lora.r > 0"),
    ]:
        cfg = tiny_config()
        cfg.rollout.max_staleness = 1
        change(cfg)
        assert reference_refusal(cfg).startswith(expected)


def test_a_reference_reset_keeps_the_reference_forward_in_the_update(tmp_path):
    """algo.kl.ref_reset_every=2: the generator does not compute the reference log-probs (pi_ref becomes the
    policy of step 2, which it samples ahead of), and the run still matches rollout.inject.stale=1."""
    runs = {}
    for name in ("async", "stale"):
        cfg = _learning_config(steps=3)
        cfg.algo.kl.ref_reset_every = 2
        cfg.trainer.save_every = 0
        cfg.evaluation.enabled = False
        _one_version_behind(cfg, name)
        _train(cfg, tmp_path / name)
        runs[name] = read_metrics(tmp_path / name / "metrics.jsonl")
    assert all("time/generator_reference" not in m and m["time/generator_reward"] > 0 for m in runs["async"])
    for a, b in zip(runs["async"], runs["stale"]):
        assert {k: v for k, v in a.items() if not k.startswith(("time/", "throughput/"))} == \
            {k: v for k, v in b.items() if not k.startswith(("time/", "throughput/"))}


@pytest.mark.numerics
def test_reference_logprobs_of_another_batch_composition_differ_by_float_rounding():
    """The generator computes log pi_ref in the update's micro-batches (bit-identical to the update's own); in
    another composition (here 3 full rows a pass against 12 rows sharing each prompt) only the rounding of
    the matrix products differs: within 1e-5 (measured 4.8e-7 on this model)."""
    from reasoning_rl.policy.engines import make_engine
    from reasoning_rl.policy.logprobs import frozen_logprobs

    cfg = tiny_config()
    model, tokenizer = load_model(cfg.model)
    model.eval()
    sampling = SamplingConfig(max_new_tokens=6, temperature=0.7, top_k=20)
    groups = make_engine("native", model, tokenizer).generate(["1+1=", "12+7=", "3+4="], 4, sampling, seed=0)
    completions = [c for g in groups for c in g]
    job = ReferenceJob(model, micro_batch=3, shared_rows=1, precision="fp32", eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)
    for c, lp in zip(completions, job.logprobs(completions, sampling)):
        c.ref_logprobs = lp
    trained = [c.token_ids or [tokenizer.eos_token_id] for c in completions]
    ours = reference_rows(completions, trained)
    theirs = frozen_logprobs(model, [c.prompt_token_ids for c in completions], trained, tokenizer.pad_token_id,
                             0.7, 12, 4, top_k=20)
    for a, b in zip(ours, theirs):  # the reference job's rows against the trainer's (< 64 positions)
        assert_close_up_to_rounding(a, b, terms=decoder_terms(model.config, 64))
    assert reference_rows(completions, [[*t, 0] for t in trained]) is None  # other rows: the update computes them
    completions[0].ref_logprobs = None
    assert reference_rows(completions, trained) is None  # one missing: the update computes them all


def test_the_generators_rewards_are_used_only_for_exactly_the_inputs_it_scored():
    """PrescoredReward hands over the generator's scores when the rollout asks for the texts, references and
    fields the generator scored (once), and scores in the trainer otherwise."""
    from types import SimpleNamespace

    from rewards.compose import CompositeReward
    from rewards.pool import WorkerPool
    from rewards.specs import RewardSpec

    reward = CompositeReward([RewardSpec(name="format", options={"pattern": "[0-9]"})])
    pool = WorkerPool(0)
    texts, refs, fields = ["a1", "b"], ["2", "3"], [{"n": 1}, {"n": 2}]
    # Scores that are not the texts' own ([1, 0]), to tell whose were returned.
    marked = reward.score(["b", "a1"], refs, fields, pool=pool)
    waiting: list[Scored | None] = []
    prescored = PrescoredReward(reward, SimpleNamespace(take_scored=lambda: waiting.pop() if waiting else None))
    waiting.append(Scored(texts, refs, fields, marked))
    assert prescored.score(texts, refs, fields, pool=pool).rewards == [0.0, 1.0]  # the generator's
    assert prescored.score(texts, refs, fields, pool=pool).rewards == [1.0, 0.0]  # taken once: scored here
    waiting.append(Scored(texts, refs, fields, marked))
    assert prescored.score(texts, refs, [{"n": 1}, {"n": 3}], pool=pool).rewards == [1.0, 0.0]  # other fields
    assert prescored.specs == reward.specs and prescored.verifiers == reward.verifiers


@pytest.mark.numerics
def test_a_resumed_async_run_matches_the_uninterrupted_run(tmp_path, resume_matches_uninterrupted_run):
    """In-flight rollouts are dropped at the break and sampled again from the checkpoint, which holds the
    k older versions: the resumed run logs the same metrics, bit for bit."""
    cfg = _learning_config()
    cfg.rollout.max_staleness = 1
    full = resume_matches_uninterrupted_run(cfg, tmp_path)
    assert [m["rollout/policy_version"] for m in full] == [0, 0, 1, 2]
    history = load_trainer_state(tmp_path / "killed" / "checkpoint-2")["weight_history"]
    assert [v for v, _ in history] == [1]  # step 3 (index 2) samples with version 1


@pytest.mark.numerics
def test_a_resumed_stale_injection_keeps_its_weight_history(tmp_path, resume_matches_uninterrupted_run):
    """rollout.inject.stale=2: the checkpoint holds versions 0 and 1, so steps 3 and 4 after the resume
    sample with them, as in the run without the break (before, they sampled with the resumed weights)."""
    cfg = _learning_config()
    cfg.rollout.inject.stale = 2
    full = resume_matches_uninterrupted_run(cfg, tmp_path)
    assert [m["mismatch/staleness_max"] for m in full] == [0.0, 1.0, 2.0, 2.0]
    history = load_trainer_state(tmp_path / "full" / "checkpoint-2")["weight_history"]
    assert [v for v, _ in history] == [0, 1]


def test_a_generator_error_reaches_the_trainer_with_its_traceback():
    cfg = tiny_config()
    model, tokenizer = load_model(cfg.model)
    engine = AsyncEngine(model, tokenizer, "native", max_staleness=1)
    try:
        engine.update_policy(model, 0)
        sampling = SamplingConfig(max_new_tokens=2)
        engine.prefetch([Request(step=0, prompts=["1+1="], n=0, sampling=sampling, seed=0, version=0)])
        with pytest.raises(GeneratorError, match="n must be >= 1"):  # the engine's own error, raised over there
            engine.generate(["1+1="], 0, sampling, seed=0)
    finally:
        engine.close()


def test_a_killed_generator_fails_the_run_instead_of_hanging(tmp_path, monkeypatch):
    """The generator is killed (SIGKILL) once it has its first requests: the run stops within seconds with
    an error naming the exit code, and the CLI records status failed."""
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import run_training
    from reasoning_rl.config_store import register_configs
    from tests.reasoning_rl.test_cli_errors import TINY

    prefetch = AsyncEngine.prefetch

    def prefetch_then_kill(self, requests):
        prefetch(self, requests)
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.join(10)

    monkeypatch.setattr(AsyncEngine, "prefetch", prefetch_then_kill)
    run = tmp_path / "run"
    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=[*TINY, "rollout=native", "rollout.max_staleness=1",
                                                      "trainer.steps=2", f"trainer.output_dir={run}"])
    t0 = time.perf_counter()
    with pytest.raises(GeneratorError, match=f"exited with code {-signal.SIGKILL}"):
        run_training(cfg)
    assert time.perf_counter() - t0 < 120
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["stage"]) == ("failed", "training")
    assert "rollout generator process" in status["error"]
