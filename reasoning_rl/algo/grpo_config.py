"""GRPO's settings (``conf/algo/grpo.yaml`` and its variants), apart from the algorithm module.

``reasoning_rl.config`` types the default run's ``algo`` group with :class:`GRPOConfig`; keeping
the dataclass here, with nothing but the groups' dataclasses, lets the configuration be imported
without the training code (``reasoning_rl.algo.grpo``: rollouts, models, optimiser).

The settings come in groups, one dataclass each, mirrored by ``conf/algo/grpo.yaml``:

    algo.advantage        the estimator and its options          (reasoning_rl.algo.advantages)
    algo.policy_loss      the objective, clip range, dual clip   (reasoning_rl.algo.losses)
    algo.kl               beta, estimator, placement, clamp      (reasoning_rl.algo.losses)
    algo.entropy_control  which tokens keep the gradient         (reasoning_rl.algo.entropy_control)
    algo.correction       the off-policy correction              (reasoning_rl.algo.corrections)
    algo.dynamic_sampling DAPO's dynamic sampling                (reasoning_rl.algo.grpo)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from reasoning_rl.algo.advantages import AdvantageConfig
from reasoning_rl.algo.base import ClippedPolicyConfig
from reasoning_rl.algo.entropy_control import EntropyControlConfig
from reasoning_rl.algo.losses import KLConfig, LossGroups
from reasoning_rl.algo.policy_objectives import PolicyLossConfig
from reasoning_rl.settings.algo import Capabilities

__all__ = ["DynamicSamplingConfig", "GRPOConfig"]


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (arXiv 2503.14476, sec. 3.2; verl's ``algorithm.filter_groups``)."""

    enabled: bool = False
    """Drop groups whose rewards are all equal and sample more prompts until prompts_per_step informative
    groups are found (or the round cap is hit)."""
    max_rounds: int = 3
    """Extra sampling rounds a step may spend on dynamic sampling before training on what it has."""

    def problems(self) -> list[str]:
        return [f"algo.dynamic_sampling.max_rounds must be >= 0, got {self.max_rounds}"] if self.max_rounds < 0 else []


@dataclass
class GRPOConfig(ClippedPolicyConfig):
    """GRPO and its variants (``conf/algo/grpo.yaml``, ``dapo.yaml``, ``dr_grpo.yaml``, ``rloo.yaml``, ...)."""

    name: str = "grpo"
    capabilities: ClassVar[Capabilities] = Capabilities(
        samples_groups=True, mixed_precision=True, lora=True, async_rollouts=True, fsdp=True)
    """GRPO and its variants shard with FSDP2: every rank trains on its share of the groups, the same number
    of forward/backward passes (tests/reasoning_rl/test_distributed.py); reasoning_rl.compat names the two
    settings that break that."""
    variant: str = "grpo"
    group_size: int = 8
    """G: completions sampled per prompt."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """A_i from the group's rewards (reasoning_rl.algo.advantages)."""
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """The policy objective (reasoning_rl.algo.policy_objectives.POLICY_LOSSES) and its clip range and options."""
    kl: KLConfig = field(default_factory=KLConfig)
    """The KL(pi_theta || pi_ref) term: weight, estimator, where it goes, clamp, reference resets."""
    entropy_control: EntropyControlConfig = field(default_factory=EntropyControlConfig)
    """Which tokens keep the policy gradient (reasoning_rl.algo.entropy_control)."""
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    """DAPO's dynamic sampling."""
    shared_prompt_forward: bool = True
    """The G completions of a group share their prompt: encode it once in the policy and reference
    forward passes and reuse its key/value cache for them (exact: same log-probs and gradients;
    reasoning_rl.policy.logprobs; with micro-batches that cut groups, once per gcd(micro_batch_size, G)
    rows, docs/grpo.md). false = every row runs prompt + completion in full."""

    skip_zero_advantage_groups: bool = False
    """Leave the groups whose advantages are all 0 out of the update's forward and backward passes: exact
    (the same gradient; reasoning_rl.algo.batch.rows_with_gradient) when the loss has no term besides the
    advantage-weighted one, so it needs algo.kl.beta=0 and no KL-Cov. The loss's denominators still count
    every row; the token statistics (entropy, ratio, clip fractions) are then over the rows trained."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.skip_zero_advantage_groups and (self.kl.beta != 0 or self.entropy_control.name == "kl_cov"):
            out.append("algo.skip_zero_advantage_groups=true leaves out rows whose gradient is 0 only when the loss "
                       "has no term besides the advantage: set algo.kl.beta=0 and an algo.entropy_control.name "
                       "other than kl_cov, or algo.skip_zero_advantage_groups=false")
        if self.group_size < 2:
            out.append(f"algo.group_size must be >= 2 (group statistics need 2 samples), got {self.group_size}")
        out += self.advantage.problems(self.group_size)
        out += self.entropy_control.problems(self.num_iterations) + self.dynamic_sampling.problems()
        return out

    def loss_groups(self) -> LossGroups:
        """The groups ``reasoning_rl.algo.losses.grpo_loss`` reads."""
        return LossGroups(self.policy_loss, self.kl, self.loss_aggregation, self.correction, self.entropy_control)

    def reference_changes(self) -> bool:
        return self.kl.ref_reset_every > 0

    def resamples(self) -> bool:
        return self.dynamic_sampling.enabled

    def varies_passes(self) -> bool:
        return self.skip_zero_advantage_groups

    def shares_prompt_forward(self) -> bool:
        return self.shared_prompt_forward
