"""SFT, RFT, Online RFT and DPO on the shared run loop: config truth, data sources, the update,
resume, and the unified-paradigm preset."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from reasoning_rl.algo import get_algorithm
from reasoning_rl.algo.dpo import DPO, DPOConfig, make_pairs
from reasoning_rl.algo.offline import FILE_NAME, Group, OfflineSamples, Sample
from reasoning_rl.algo.rft import RFT, RFTConfig
from reasoning_rl.algo.sft import SFT, MissingSolutionError, SFTConfig
from reasoning_rl.cli import to_train_config
from reasoning_rl.config_checks import ConfigError
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trainer import Trainer
from reasoning_rl.validation import validate
from tests.conftest import assert_close_up_to_rounding, decoder_terms
from tests.reasoning_rl.conftest import _train, assert_runs_train_alike, compose_train

CONF = Path(__file__).resolve().parents[3] / "conf"


def _cfg(cfg, algo, steps=4):
    """The shared tiny test config (``small_cfg``) with ``algo`` at the tiny batch sizes."""
    cfg.trainer.steps = steps
    common = {"micro_batch_size": 3, "learning_rate": 1e-3}
    if isinstance(algo, SFTConfig):
        cfg.algo = dataclasses.replace(algo, prompts_per_step=4, **common)
    else:
        cfg.algo = dataclasses.replace(algo, prompts_per_step=2, group_size=4, **common)
    return cfg


# -- config ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "cls", "config"), [("sft", SFT, SFTConfig), ("rft", RFT, RFTConfig),
                                                     ("dpo", DPO, DPOConfig)])
def test_registered_and_schema_defaults_equal_the_yaml(name, cls, config):
    entry = get_algorithm(name)
    assert (entry.algorithm, entry.config_class) == (cls, config)
    path = CONF / "algo" / f"{name}.yaml"
    values = {k: v for k, v in yaml.safe_load(path.read_text()).items() if k != "defaults"}
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    assert set(values) == set(defaults), set(values) ^ set(defaults)
    assert {k: v for k, v in values.items() if v != defaults[k]} == {}
    assert path.read_text().startswith(f"# reasoning-rl-train algo={name}")


def _sequences_per_step(algo) -> int:
    """Completions (or reference solutions, for SFT) one optimisation step trains on."""
    return algo.prompts_per_step * getattr(algo, "group_size", 1)


@pytest.mark.parametrize(("preset", "cls", "identity"), [
    ("sft", SFTConfig, {"variant": "sft", "name": "sft"}),
    ("rft", RFTConfig, {"variant": "rft", "name": "rft", "samples_from": "initial"}),
    ("online_rft", RFTConfig, {"variant": "online_rft", "name": "rft", "samples_from": "current"}),
    ("dpo", DPOConfig, {"variant": "dpo", "name": "dpo"}),
])
def test_presets_compose_with_the_budget_of_grpo(preset, cls, identity):
    """Each unified-paradigm preset composes to its own module and trains on as many sequences a step
    as GRPO does on the same task and model (the comparison is at equal budget); the numbers
    themselves are the recipes' to choose, so they are read from GRPO's composition, not pinned."""
    grpo = to_train_config(compose_train([])).algo
    cfg = to_train_config(compose_train([f"algo={preset}"]))
    assert isinstance(cfg.algo, cls)
    assert {k: getattr(cfg.algo, k) for k in identity} == identity
    assert _sequences_per_step(cfg.algo) == _sequences_per_step(grpo)
    validate(cfg)


def test_bad_settings_name_their_keys(small_cfg):
    text = "\n".join(RFTConfig(group_size=0, samples_from="yesterday").problems()
                     + DPOConfig(group_size=1, beta=0.0, pairs_per_prompt=-1).problems())
    for key in ("group_size", "samples_from", "beta", "pairs_per_prompt"):
        assert f"algo.{key}" in text
    cfg = _cfg(small_cfg, RFTConfig(samples_from="yesterday"))
    with pytest.raises(ConfigError, match="samples_from"):
        Trainer(cfg, "/nonexistent/never-created")


def test_unified_paradigm_preset_sweeps_every_method_with_64_samples():
    text = (CONF / "experiment" / "unified_paradigm.yaml").read_text()
    params = yaml.safe_load(text)["hydra"]["sweeper"]["params"]
    assert params["algo"].split(",") == ["sft", "rft", "online_rft", "dpo", "ppo", "grpo"]
    for algo in params["algo"].split(","):
        cfg = to_train_config(compose_train(["experiment=unified_paradigm", f"algo={algo}"]))
        validate(cfg)
        assert cfg.evaluation.samples_per_problem == 64 and cfg.trainer.steps == 200
        sampled = 0 if algo == "sft" else cfg.algo.prompts_per_step * cfg.algo.group_size
        trained = cfg.algo.prompts_per_step if algo == "sft" else sampled
        assert (sampled, trained) == ((0, 128) if algo == "sft" else (128, 128)), algo


# -- SFT -------------------------------------------------------------------------------------------

def test_sft_trains_on_reference_solutions_and_lowers_their_nll(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, SFTConfig(), steps=12)
    _, summary = _train(cfg, tmp_path)
    metrics = read_metrics(tmp_path / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert all(m["update/sequences"] == 4 for m in metrics)
    assert metrics[-1]["nll/token_mean"] < metrics[0]["nll/token_mean"]
    assert summary["label"] == "SFT" and "pass@1" in summary["eval_after"]


def test_sft_refuses_rows_without_a_solution(small_cfg, tmp_path):
    def drop_solutions(trainer):
        for e in trainer.train_examples[:3]:
            e.solution = None

    with pytest.raises(MissingSolutionError, match=r"3 rows.*reference_completion"):
        _train(_cfg(small_cfg, SFTConfig()), tmp_path, drop_solutions)


# -- RFT and Online RFT ----------------------------------------------------------------------------

def _spy_generate(trainer):
    calls = []
    generate = trainer.engine.generate

    def counted(*args, **kwargs):
        calls.append(trainer.step)
        return generate(*args, **kwargs)

    trainer.engine.generate = counted
    trainer.calls = calls


def test_rft_samples_the_initial_policy_once_with_the_whole_budget(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, RFTConfig(), steps=4)
    cfg.evaluation.enabled = False
    cfg.trainer.health.preflight = False  # its look at step 1's batch is a sampling call too; these count the algorithm's
    trainer, _ = _train(cfg, tmp_path, _spy_generate)
    assert trainer.calls == [0, 0, 0, 0]  # all four slots sampled at setup, none during training
    data = OfflineSamples.load(tmp_path / FILE_NAME)
    assert [len(slot) for slot in data.slots] == [2, 2, 2, 2]
    assert all(len(g.samples) == 4 for slot in data.slots for g in slot)
    metrics = read_metrics(tmp_path / "metrics.jsonl")
    for m, slot in zip(metrics, data.slots):
        accepted = sum(x.correct for g in slot for x in g.samples)
        assert m["rft/accepted_fraction"] == pytest.approx(accepted / 8)
        assert m["update/sequences"] == accepted  # only accepted samples go through the model
        assert m["update/skipped"] == (1.0 if accepted == 0 else 0.0)


def test_online_rft_samples_the_current_policy_every_step(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, RFTConfig(variant="online_rft", samples_from="current"), steps=3)
    cfg.evaluation.enabled = False
    cfg.trainer.health.preflight = False  # its look at step 1's batch is a sampling call too; these count the algorithm's
    trainer, summary = _train(cfg, tmp_path, _spy_generate)
    assert trainer.calls == [0, 1, 2]
    assert summary["label"] == "Online RFT" and not (tmp_path / FILE_NAME).exists()
    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    # The logged coefficient of each completion is I(o): 1 exactly when its reward says correct.
    assert {(r["reward"] == 1.0, r["advantage"]) for r in rows} <= {(True, 1.0), (False, 0.0)}


def test_a_step_without_an_accepted_sample_changes_no_weight(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, RFTConfig(variant="online_rft", samples_from="current"), steps=2)
    cfg.evaluation.enabled = False
    trainer = Trainer(cfg, tmp_path)
    try:
        trainer.reward.score = _all_wrong(trainer.reward.score)
        trainer.algorithm.setup(None)
        before = [p.detach().clone() for p in trainer.model.parameters()]
        out = trainer.algorithm.step(0)
        after = list(trainer.model.parameters())
    finally:
        trainer.close()
    assert out.metrics["update/skipped"] == 1.0 and out.metrics["rft/accepted_fraction"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def _all_wrong(score):
    def wrong(completions, *args, **kwargs):
        return score(["no answer"] * len(completions), *args, **kwargs)
    return wrong


def _resumes_like_uninterrupted(cfg, tmp_path):
    _train(cfg, tmp_path / "full")

    class Killed(Exception):
        pass

    trainer = Trainer(cfg, tmp_path / "killed")
    step = trainer.algorithm.step

    def dies_at_step_3(n):
        if n == 2:
            raise Killed
        return step(n)

    trainer.algorithm.step = dies_at_step_3
    with pytest.raises(Killed):
        trainer.train()
    trainer.close()
    cfg.trainer.resume = True
    _train(cfg, tmp_path / "killed")
    full, resumed = (read_metrics(tmp_path / d / "metrics.jsonl") for d in ("full", "killed"))
    assert [m["step"] for m in resumed] == [1, 2, 3, 4]
    assert_runs_train_alike((resumed, full), cfg, trainer.model.config, keys=None)


@pytest.mark.numerics
@pytest.mark.parametrize("algo", [RFTConfig(), DPOConfig()], ids=["rft", "dpo"])
def test_offline_methods_resume_on_their_saved_data(small_cfg, algo, tmp_path):
    cfg = _cfg(small_cfg, algo)
    cfg.evaluation.enabled = False
    _resumes_like_uninterrupted(cfg, tmp_path)


def test_resuming_without_the_offline_samples_is_a_clear_error(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, RFTConfig())
    cfg.evaluation.enabled = False
    _train(cfg, tmp_path)
    (tmp_path / FILE_NAME).unlink()
    cfg.trainer.resume = True
    with pytest.raises(FileNotFoundError, match=r"offline_samples\.jsonl are missing; start a new run folder"):
        _train(cfg, tmp_path)


# -- DPO -------------------------------------------------------------------------------------------

def _sample(ids, correct, scorable=True):
    return Sample(token_ids=ids, text="", reward=float(correct), correct=correct, scorable=scorable,
                  finish_reason="stop")


def test_pairs_join_correct_with_verified_wrong_samples_only():
    import random

    group = Group(0, [5, 6], [_sample([1], True), _sample([2], False), _sample([3], False),
                              _sample([4], False, scorable=False), _sample([], True)])
    pairs = make_pairs(group, random.Random(0), eos_token_id=9)
    assert len(pairs) == 2  # min(2 correct, 2 verified wrong); the unscorable one is in no pair
    assert {tuple(p.chosen) for p in pairs} == {(1,), (9,)}  # the empty completion is its EOS
    assert {tuple(p.rejected) for p in pairs} <= {(2,), (3,)}
    assert len(make_pairs(group, random.Random(0), 9, limit=1)) == 1
    assert make_pairs(Group(0, [5], [_sample([1], True), _sample([2], True)]), random.Random(0), 9) == []


def _every_other_right(score):
    """Scores with every even completion replaced by its reference answer: groups hold both kinds."""
    def half(completions, references, *args, **kwargs):
        texts = [str(r) if i % 2 == 0 else "no answer" for i, r in enumerate(references)]
        return score(texts, references, *args, **kwargs)
    return half


@pytest.mark.numerics
def test_dpo_starts_at_log2_with_reference_logprobs_of_the_initial_policy(small_cfg, tmp_path):
    cfg = _cfg(small_cfg, DPOConfig(), steps=3)
    cfg.evaluation.enabled = False
    cfg.trainer.save_every = 0

    def half_right(trainer):
        trainer.reward.score = _every_other_right(trainer.reward.score)

    trainer, _ = _train(cfg, tmp_path, half_right)
    pairs = [json.loads(line) for line in (tmp_path / "dpo_pairs.jsonl").read_text().splitlines()]
    assert [len(p) for p in pairs] == [4, 4, 4]  # 2 prompts x min(2 right, 2 wrong)
    metrics = read_metrics(tmp_path / "metrics.jsonl")
    assert [m["dpo/pairs"] for m in metrics] == [4.0, 4.0, 4.0]
    # Step 1 comes before any update: pi_theta = pi_ref, so z = 0 and the loss is log 2 for every pair.
    # z is a difference of two sequences' log-prob sums: rounding of their size (log V per completion token).
    lp_scale = cfg.rollout.max_new_tokens * math.log(trainer.model.config.vocab_size)
    terms = decoder_terms(trainer.model.config, 64)
    assert_close_up_to_rounding(metrics[0]["loss/total"], math.log(2), terms=terms, scale=lp_scale)
    assert_close_up_to_rounding(metrics[0]["dpo/margin_mean"], 0.0, terms=terms, scale=lp_scale)
    assert_close_up_to_rounding(metrics[0]["dpo/coefficient_mean"], 0.1 * 0.5, terms=terms, scale=lp_scale)  # beta * sigmoid(0)
    # Then DPO orders the pairs: the chosen completions gain on the rejected ones.
    assert metrics[-1]["dpo/margin_mean"] > 0
    assert trainer.algorithm.held_models() == []  # no reference model held during training


def test_offline_files_are_per_rank_in_a_data_parallel_run(monkeypatch):
    from reasoning_rl import distributed
    from reasoning_rl.algo.offline import rank_file

    assert rank_file("offline_samples.jsonl") == "offline_samples.jsonl"
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    assert rank_file("offline_samples.jsonl") == "offline_samples.rank1.jsonl"
    assert rank_file("dpo_pairs.jsonl") == "dpo_pairs.rank1.jsonl"
