"""Algorithms are modules found by name; a new one plugs into the run loop without touching GRPO."""

from dataclasses import dataclass

import pytest
import torch

from reasoning_rl.algo import (
    AlgoConfig,
    Algorithm,
    StepOutput,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)
from reasoning_rl.algo.groups import completion_rows, rollout_metrics, sample_and_score
from reasoning_rl.algo.grpo import GRPO, GRPOConfig
from reasoning_rl.config import TrainConfig
from reasoning_rl.run_folder.metrics_log import read_metrics
from reasoning_rl.trainer import Trainer


def test_grpo_is_registered_with_its_config():
    entry = get_algorithm("grpo")
    assert (entry.algorithm, entry.config_class) == (GRPO, GRPOConfig)
    assert "grpo" in list_algorithms()


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(KeyError) as info:
        get_algorithm("gpro")
    message = str(info.value)
    assert "gpro" in message and "Did you mean 'grpo'" in message and "Known algorithms: " in message


def test_duplicate_name_and_bad_classes_are_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_algorithm("grpo", GRPOConfig)(type("Other", (GRPO,), {}))
    with pytest.raises(TypeError, match="AlgoConfig"):
        register_algorithm("x", dict)
    with pytest.raises(TypeError, match="Algorithm"):
        register_algorithm("x", AlgoConfig)(object)


@dataclass
class BestOfConfig(AlgoConfig):
    name: str = "best_of_n_test"
    variant: str = "best_of_n_test"
    samples: int = 3
    """Completions per prompt."""


@register_algorithm("best_of_n_test", BestOfConfig)
class BestOfN(Algorithm):
    """A toy algorithm, defined outside the package: SFT on the best of n own samples."""

    label = "best-of-n"

    def setup(self, state):
        self.optimizer = torch.optim.SGD(self.ctx.model.parameters(), lr=self.cfg.learning_rate)
        self.updates = 0 if state is None else state["updates"]

    def state_dict(self):
        return {"updates": self.updates}

    def step(self, step):
        ctx = self.ctx
        examples = [ctx.train_examples[i] for i in ctx.sampler.next(self.cfg.prompts_per_step)]
        groups = sample_and_score(ctx, examples, self.cfg.samples, seed=step)
        self.updates += 1
        metrics = rollout_metrics(groups, ctx.reward.specs[0].key)
        metrics["updates"] = self.updates
        return StepOutput(metrics, completion_rows(groups))


def test_a_new_algorithm_is_one_module_on_the_shared_loop(small_cfg, tmp_path):
    cfg = TrainConfig(task=small_cfg.task, model=small_cfg.model, rollout=small_cfg.rollout,
                      trainer=small_cfg.trainer, evaluation=small_cfg.evaluation,
                      algo=BestOfConfig(prompts_per_step=2))
    cfg.trainer.steps = 3
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [m["updates"] for m in metrics] == [1, 2, 3]
    assert {"reward/mean", "time/step", "throughput/completion_tokens_per_s"} <= set(metrics[0])
    assert summary["algorithm"] == "best_of_n_test" and summary["eval_after"]
    assert not (tmp_path / "run" / "reference").exists()
    # The shared loop checkpoints the algorithm's own state: resuming continues its count.
    cfg.trainer.steps, cfg.trainer.resume = 4, True
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        trainer.train()
    finally:
        trainer.close()
    assert read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]["updates"] == 3 + 1


def test_settings_of_another_algorithm_are_refused(small_cfg, tmp_path):
    small_cfg.algo = BestOfConfig(name="grpo")
    with pytest.raises(ValueError, match="GRPOConfig"):
        Trainer(small_cfg, tmp_path)
