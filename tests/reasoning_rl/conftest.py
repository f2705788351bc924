"""A tiny, fast training configuration for end-to-end tests."""

import pytest
import torch

from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_store import register_configs
from reasoning_rl.policy.runtime_check import TOLERANCES
from reasoning_rl.settings.model import TinyModelConfig
from tests.conftest import assert_close_up_to_rounding, decoder_terms

RUNTIME_CHECK = "policy/runtime_max_abs_diff"
PROCESS_DIAGNOSTICS = ("time/", "throughput/", RUNTIME_CHECK)
"""Logged values a resumed run may not repeat bit for bit, because each process measures them for itself rather
than training on them: wall-clock timings and throughput, and the start-up runtime check
(reasoning_rl.policy.runtime_check), which each process runs once on the weights it starts from: the
uninterrupted run on the initial weights, the resumed one on checkpoint-2's. Its value is rounding
(0.0 on one CPU kernel set, 4.8e-07 on another); the resume check holds it to its dtype's tolerance instead."""


TINY_OVERRIDES = [
    "model.tiny.hidden_size=32", "model.tiny.num_layers=1", "model.tiny.num_heads=2", "model.tiny.intermediate_size=64",
    "task.max_train_examples=32", "task.max_eval_examples=4", "algo.prompts_per_step=2", "rollout.max_new_tokens=3",
    "warmstart.enabled=false", "evaluation.num_examples=4", "evaluation.samples_per_problem=1",
    "trainer.progress_bar=false", "trainer.tensorboard=false", "trainer.num_threads=1", "rollout.reward_workers=1",
]
"""Command-line overrides (reasoning-rl-train, a sweep) for a tiny run of a few seconds on one core; each user
adds its own trainer.steps and trainer.save_every."""


def tiny_config(steps: int = 4) -> TrainConfig:
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
    cfg.task.prompt_template = "{question} Answer: "
    cfg.task.max_train_examples = 64
    cfg.task.max_eval_examples = 8
    cfg.algo.prompts_per_step = 2
    cfg.algo.group_size = 4
    cfg.algo.micro_batch_size = 3  # not a divisor of 8: exercises uneven gradient accumulation
    cfg.algo.learning_rate = 1e-3
    cfg.rollout.max_new_tokens = 4
    cfg.rollout.reward_workers = 1
    cfg.trainer.steps = steps
    cfg.trainer.save_every = 2
    cfg.trainer.progress_bar = False
    cfg.trainer.tensorboard = False
    cfg.trainer.num_threads = 1
    cfg.evaluation.num_examples = 8
    cfg.evaluation.samples_per_problem = 2
    return cfg


@pytest.fixture(scope="session", autouse=True)
def hydra_schemas() -> None:
    """The run's and every algorithm's schema registered with Hydra's ConfigStore (reasoning_rl.config_store),
    as reasoning-rl-train does, for every test that composes a config."""
    register_configs()


@pytest.fixture
def small_cfg() -> TrainConfig:
    return tiny_config()


def _train(cfg, run_dir, before_train=None):
    """Train ``cfg`` in ``run_dir`` in this process: (trainer, summary); ``before_train(trainer)`` runs first."""
    from reasoning_rl.trainer import Trainer

    trainer = Trainer(cfg, run_dir)
    try:
        if before_train is not None:
            before_train(trainer)
        return trainer, trainer.train()
    finally:
        trainer.close()


def compose_train(overrides, hydra=False):
    """``conf/train.yaml`` composed with ``overrides`` as the CLI would (a DictConfig; with Hydra's own
    config when ``hydra``)."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=hydra)


@pytest.fixture
def resume_matches_uninterrupted_run():
    """``check(cfg, tmp_path)``: train 4 steps uninterrupted; train again, killed in step 3 (after
    the step-2 checkpoint), then resumed; the resumed run must log the same metrics, bit for bit
    (PROCESS_DIAGNOSTICS aside). Returns the uninterrupted run's metrics for further checks."""

    def check(cfg, tmp_path):
        from reasoning_rl.run_folder.checkpoint import list_checkpoints
        from reasoning_rl.run_folder.metrics_log import read_metrics
        from reasoning_rl.trainer import Trainer

        _train(cfg, tmp_path / "full")

        class Killed(Exception):
            pass

        trainer = Trainer(cfg, tmp_path / "killed")
        update = trainer.algorithm.update

        def dies_at_step_3(ro):
            if trainer.step == 2:
                raise Killed
            return update(ro)

        trainer.algorithm.update = dies_at_step_3
        with pytest.raises(Killed):
            trainer.train()
        trainer.close()
        assert [p.name for p in list_checkpoints(tmp_path / "killed")] == ["checkpoint-2"]

        cfg.trainer.resume = True
        _train(cfg, tmp_path / "killed")
        full = read_metrics(tmp_path / "full" / "metrics.jsonl")
        resumed = read_metrics(tmp_path / "killed" / "metrics.jsonl")
        assert [m["step"] for m in resumed] == [1, 2, 3, 4]
        for a, b in zip(full, resumed):
            for key, value in a.items():
                if key.startswith(PROCESS_DIAGNOSTICS) or value is None:
                    continue
                # Bit for bit: the resumed run computes on the same values at the same alignment
                # (reasoning_rl.policy.loading.align_tensors), so no training value may differ, not even rounding.
                assert b[key] == value, (a["step"], key, value, b[key])
            # The start-up runtime check passed in both processes, each on its own starting weights.
            for m in (a, b):
                if m.get(RUNTIME_CHECK) is not None:
                    assert m[RUNTIME_CHECK] <= TOLERANCES[torch.float32], (m["step"], m[RUNTIME_CHECK])
        return full

    return check


def assert_runs_train_alike(runs, cfg, model_config, keys=("reward/mean", "loss/total", "kl/mean", "entropy/mean",
                                                            "grad/norm")):
    """Two runs' metrics (lists of metrics.jsonl lines) that compute the same steps by another order of operations
    (gradient checkpointing, another forward path) agree up to rounding (tests/conftest.py: rounding_atol).

    Terms: a decoder's chain over rows of under 64 positions (the tiny task's prompts are at most 25 tokens), once
    per step, the gradients summing over a micro-batch. Scale: these metrics are sums of log-prob-sized terms
    (about log V for an untrained model), or differences of them (kl/mean, exactly 0 on one path and rounding on
    the other); a metric larger than that is its own scale. ``keys=None``: every logged training value."""
    import math

    first, second = runs
    assert len(first) == len(second)
    terms = len(first) * decoder_terms(model_config, positions=64, rows=cfg.algo.micro_batch_size)
    for x, y in zip(first, second):
        assert x["step"] == y["step"]
        for key in keys or [k for k, v in y.items() if v is not None and not k.startswith(PROCESS_DIAGNOSTICS)]:
            assert_close_up_to_rounding(x[key], y[key], terms=terms, scale=max(abs(y[key]), math.log(model_config.vocab_size)),
                                        msg=f"step {x['step']} {key}")


def assert_logprobs_close(actual, expected, model_config, positions: int = 64, msg: str = ""):
    """Two paths' per-token log-probs of the same tokens (a cache carried or recomputed, ids or text, another
    attention shape) agree up to rounding (tests/conftest.py: rounding_atol). Terms: the decoder's chain over
    rows of ``positions``. Scale: a log-prob is a logit minus a log-sum-exp over the vocabulary, terms of about
    log V; the larger of that and the values themselves. NaN (a token no policy sampled: an observation) must
    be NaN on both paths."""
    import math

    actual, expected = torch.as_tensor(actual, dtype=torch.float64), torch.as_tensor(expected, dtype=torch.float64)
    assert actual.shape == expected.shape, msg
    assert torch.equal(actual.isnan(), expected.isnan()), f"{msg}: NaN at other positions"
    kept = ~expected.isnan()
    scale = max(float(expected[kept].abs().max()) if kept.any() else 0.0, math.log(model_config.vocab_size))
    assert_close_up_to_rounding(actual[kept], expected[kept], terms=decoder_terms(model_config, positions),
                                dtype=torch.float32, scale=scale, msg=msg)


def tiny_model_config(tiny: TinyModelConfig):
    """The transformers config of the tiny model ``tiny`` describes (for :func:`decoder_terms`)."""
    from reasoning_rl.policy.loading import build_tiny_model

    return build_tiny_model(tiny)[0].config


PLUGIN_VERIFIERS = '''
import time


def exact_int(completion, reference, **fields):
    raise ValueError("exact_int cannot parse " + repr(completion[:10]))


def hangs(completion, reference, **fields):
    time.sleep(600)
    return 0.0
'''
"""A user's verifier plugin module: ``exact_int`` raises on every call, ``hangs`` never returns."""


def install_verifier_plugin(folder) -> dict[str, str]:
    """Write a verifier plugin package into ``folder`` as pip would (its module and a ``.dist-info`` with the
    ``reasoning_rl.verifiers`` entry points ``exact_int`` and ``hangs``); the environment that finds it."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "user_verifiers.py").write_text(PLUGIN_VERIFIERS)
    info = folder / "user_verifiers-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: user-verifiers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[reasoning_rl.verifiers]\nexact_int = user_verifiers:exact_int\n"
                                           "hangs = user_verifiers:hangs\n")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}
