"""Rejection-sampling fine-tuning (RFT) and Online RFT as algorithms of the shared run loop
(DeepSeekMath, arXiv 2402.03300, sec. 5.2.1; RFT: Yuan et al. 2023, arXiv 2308.01825).

Both fine-tune on the policy's own verified-correct completions, with the gradient
coefficient GC = I(o) (1 when the verifier accepts o, else 0); they differ in the data source:

    samples_from=initial  (algo=rft)         completions of the initial policy pi_sft, drawn once
                                             before training (reasoning_rl.algo.offline)
    samples_from=current  (algo=online_rft)  completions of the current policy, drawn every step

One step, read top to bottom:

    prompts      <- next prompts_per_step prompts (online) / this step's slot of the offline set
    completions  <- group_size samples per prompt, scored by the verifiers
    GC_i         <- I(o_i)
    one AdamW step on  -1/N sum_i GC_i * 1/|o_i| sum_t log pi_theta(o_it | q_i, o_i<t)

N counts every sampled completion, accepted or not: eq. 5's expectation over the sampled data
(a step with few correct samples makes a small update, as the paper's coefficient says).
Compared with GRPO, the only change of Online RFT is the coefficient: binary I(o) instead of
the graded, group-relative advantage, and no KL term.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

from reasoning_rl.algo.base import StepOutput
from reasoning_rl.algo.batch import sample_step, step_seed, trained_tokens
from reasoning_rl.algo.finetune import LikelihoodAlgorithm
from reasoning_rl.algo.groups import completion_rows, rollout_metrics
from reasoning_rl.algo.likelihood import rejection_coefficients
from reasoning_rl.algo.offline import Group, OfflineSamples, groups_of, offline_samples
from reasoning_rl.algo.registry import register_algorithm
from reasoning_rl.settings.algo import AlgoConfig, Capabilities

SAMPLE_SOURCES = ("initial", "current")


@dataclass
class RFTConfig(AlgoConfig):
    """RFT and Online RFT (``conf/algo/rft.yaml``, ``conf/algo/online_rft.yaml``)."""

    name: str = "rft"
    capabilities: ClassVar[Capabilities] = Capabilities(samples_groups=True)
    variant: str = "rft"
    group_size: int = 8
    """k: completions sampled per prompt."""
    samples_from: str = "initial"
    """initial (RFT: the policy as training starts, sampled once) or current (Online RFT: every step)."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.group_size < 1:
            out.append(f"algo.group_size must be >= 1, got {self.group_size}")
        if self.samples_from not in SAMPLE_SOURCES:
            out.append(f"algo.samples_from={self.samples_from!r} is unknown; choose one of {', '.join(SAMPLE_SOURCES)}")
        return out

    def samples_per_prompt(self) -> int:
        return self.group_size


def offline_metrics(slot: list[Group]) -> dict[str, float]:
    """Reward, accuracy and length of one offline slot (the initial policy's samples this step trains on)."""
    samples = [x for g in slot for x in g.samples]
    rewards = [x.reward for x in samples if x.reward is not None]
    lengths = [len(x.token_ids) for x in samples]
    return {"reward/mean": sum(rewards) / len(rewards) if rewards else float("nan"),
            "accuracy/train": sum(x.correct for x in samples) / len(samples),
            "completion/length_mean": sum(lengths) / len(lengths),
            "completion/truncated_fraction": sum(x.finish_reason == "length" for x in samples) / len(samples)}


@register_algorithm("rft", RFTConfig)
class RFT(LikelihoodAlgorithm):
    label = "RFT"
    cfg: RFTConfig

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.label = "Online RFT" if self.cfg.samples_from == "current" else "RFT"

    def setup(self, state: dict[str, Any] | None) -> None:
        super().setup(state)
        self.offline: OfflineSamples | None = None
        if self.cfg.samples_from == "initial":
            self.offline = offline_samples(self.ctx, self.cfg.prompts_per_step, self.cfg.group_size)

    def step(self, step: int) -> StepOutput:
        ctx, a = self.ctx, self.cfg
        t0 = time.perf_counter()
        rows: list[dict[str, Any]] = []
        if self.offline is not None:
            slot = self.offline.slots[step]
            metrics = offline_metrics(slot)
        else:
            indices, scored = sample_step(ctx, a.prompts_per_step, a.group_size,
                                          step_seed(ctx.cfg.trainer.seed, step))
            slot = groups_of(scored, indices, ctx.reward.specs[0].key)
            metrics = rollout_metrics(scored, ctx.reward.specs[0].key)
            metrics.update({"time/generate": scored.seconds.get("generate", 0.0),
                            "time/reward": scored.seconds.get("reward", 0.0)})
            if ctx.cfg.trainer.log_completions:
                coefficients = rejection_coefficients([x.correct for g in slot for x in g.samples])
                rows = completion_rows(scored, coefficients)
        t1 = time.perf_counter()
        prompts = [g.prompt_token_ids for g in slot for _ in g.samples]
        completions = [trained_tokens(x.token_ids, ctx.tokenizer.eos_token_id) for g in slot for x in g.samples]
        coefficients = rejection_coefficients([x.correct for g in slot for x in g.samples])
        metrics.update(self.weighted_update(prompts, completions, coefficients))
        metrics.update({"rft/accepted_fraction": float(coefficients.mean()), "time/rollout": t1 - t0})
        return StepOutput(metrics, rows)

