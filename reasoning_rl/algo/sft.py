"""SFT on the task's reference solutions as an algorithm of the shared run loop
(DeepSeekMath, arXiv 2402.03300, sec. 5.2.1: data source = the SFT dataset, GC = 1).

One step, read top to bottom:

    prompts      <- next prompts_per_step prompts of the task
    targets      <- each prompt's reference solution (the definition's ``reference_completion``), then EOS
    one AdamW step on  -1/N sum_i 1/|o_i| sum_t log pi_theta(o_it | q_i, o_i<t)

Nothing is sampled: SFT is the baseline that sees the dataset's solutions instead of the
policy's own attempts. ``algo=sft`` in ``experiment=unified_paradigm`` trains on as many
sequences a step as GRPO samples (conf/recipe/sft_arithmetic_tiny.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reasoning_rl.algo.base import StepOutput
from reasoning_rl.algo.finetune import LikelihoodAlgorithm
from reasoning_rl.algo.likelihood import NLL_AGGREGATIONS, sft_coefficients
from reasoning_rl.algo.registry import register_algorithm
from reasoning_rl.errors import UserError
from reasoning_rl.settings.algo import AlgoConfig


@dataclass
class SFTConfig(AlgoConfig):
    """Supervised fine-tuning on reference solutions (``conf/algo/sft.yaml``)."""

    name: str = "sft"
    variant: str = "sft"
    prompts_per_step: int = 64
    """Reference solutions per optimisation step."""
    loss_aggregation: str = "sequence_mean"
    """sequence_mean (eq. 5: each solution's token mean, then the mean over solutions) or token_mean
    (one mean over every target token of the step, the cross-entropy of the supervised warm start)."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.loss_aggregation not in NLL_AGGREGATIONS:
            out.append(f"algo.loss_aggregation={self.loss_aggregation!r} is unknown for algo=sft; "
                       f"choose one of {', '.join(NLL_AGGREGATIONS)}")
        return out


class MissingSolutionError(UserError, ValueError):
    """A training row has no reference solution for SFT to imitate."""


@register_algorithm("sft", SFTConfig)
class SFT(LikelihoodAlgorithm):
    label = "SFT"
    cfg: SFTConfig

    def setup(self, state: dict[str, Any] | None) -> None:
        missing = [e.id for e in self.ctx.train_examples if e.solution is None]
        if missing:
            raise MissingSolutionError(
                f"algo=sft needs a reference solution for every training row, but {len(missing)} rows "
                f"(first: {missing[0]!r}) lack the fields of the dataset definition's reference_completion "
                f"template; train on a split whose rows have them, or with an algorithm that samples (algo=rft)")
        super().setup(state)

    def encode_examples(self, examples: list[Any]) -> list[list[int]]:
        """The token ids trained on for each example: its solution, then EOS (the warm start's
        ``warmstart.mask_observations`` returns rows with a loss mask instead)."""
        return self.encode_targets([e.solution or "" for e in examples])

    def step(self, step: int) -> StepOutput:
        ctx = self.ctx
        examples = [ctx.train_examples[i] for i in ctx.sampler.next(self.cfg.prompts_per_step)]
        prompts = [ctx.tokenizer(e.prompt, add_special_tokens=False)["input_ids"] for e in examples]
        targets = self.encode_examples(examples)
        metrics = self.weighted_update(prompts, targets, sft_coefficients(len(targets)),
                                       aggregation=self.cfg.loss_aggregation)
        metrics["completion/length_mean"] = sum(len(t) for t in targets) / len(targets)
        return StepOutput(metrics)
