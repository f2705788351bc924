"""GRPO's settings (``conf/algo/grpo.yaml`` and its variants), apart from the algorithm module.

``reasoning_rl.config`` types the default run's ``algo`` group with :class:`GRPOConfig`; keeping
the dataclass here, with nothing but the tables its checks name, lets the configuration be
imported without the training code (``reasoning_rl.algo.grpo``: rollouts, models, optimiser).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from reasoning_rl.algo.advantages import ADVANTAGE_ESTIMATORS, STD_MODES
from reasoning_rl.algo.base import ClippedPolicyConfig
from reasoning_rl.algo.entropy_control import ENTROPY_CONTROLS
from reasoning_rl.algo.losses import KL_ESTIMATORS, KL_PLACEMENTS, POLICY_LOSSES

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig(ClippedPolicyConfig):
    """GRPO and its variants (``conf/algo/grpo.yaml``, ``dapo.yaml``, ``dr_grpo.yaml``, ``rloo.yaml``)."""

    name: str = "grpo"
    supports_mixed_precision: ClassVar[bool] = True
    supports_lora: ClassVar[bool] = True
    supports_async_rollouts: ClassVar[bool] = True
    variant: str = "grpo"
    group_size: int = 8
    """G: completions sampled per prompt."""
    beta: float = 0.04
    """Weight of the KL(pi_theta || pi_ref) penalty; 0 = no reference model is loaded at all."""
    advantage: str = "grpo"
    """Advantage estimator (reasoning_rl.algo.advantages): grpo, dr_grpo, rloo, reinforce_pp,
    w_reinforce (NSR / W-REINFORCE), pass_at_k, maxrl."""
    positive_weight: float = 0.1
    """W-REINFORCE's lambda, the weight of correct samples (advantage=w_reinforce; 0 = NSR alone)."""
    pass_k: int = 4
    """k of the pass@k advantage (advantage=pass_at_k); k = 1 is GRPO's advantage."""
    std: str = "population"
    """GRPO's scale: population (paper's worked example), unbiased (TRL/verl), batch, batch_unbiased, none."""
    adv_eps: float = 1e-6
    """eps in A_i = (r_i - mean) / (std + eps) (TRL uses 1e-4; docs/grpo.md)."""
    kl_estimator: str = "k3"
    """KL term: k3 (paper), k3_is (ratio * k3, TRL's bias correction), k1, k2 (verl); docs/grpo.md."""
    ratio_level: str = "token"
    """token (GRPO's per-token ratios) or sequence (GSPO, arXiv 2507.18071: one length-normalised ratio per sample)."""
    policy_loss: str = "clip"
    """The policy objective (reasoning_rl.algo.losses.POLICY_LOSSES): clip (GRPO/PPO), cispo
    (MiniMax-M1's clipped, detached IS weight) or gmpo (geometric mean of log-clipped token ratios)."""
    dual_clip_c: float = 0.0
    """Dual-clip PPO's c (> 1; verl uses 3): for A < 0 the loss is capped at c * |A|; 0 = off (clip only)."""
    log_ratio_clamp: float = 0.0
    """Clamp log(pi_theta / pi_old) and log(pi_ref / pi_theta) to [-x, x] before exp() (verl: 20); 0 = off."""
    kl_clamp: float = 0.0
    """Clamp the per-token KL term to [-x, x] (verl clamps k3 at 10); 0 = off."""
    kl_placement: str = "loss"
    """loss (differentiated, DeepSeekMath) or reward (detached per-token penalty in the advantage,
    A_t - beta * sum_{s >= t} KL_s; use with kl_estimator=k1). docs/grpo.md, "Where the KL goes"."""
    entropy_control: str = "none"
    """Which tokens keep the policy gradient (reasoning_rl.algo.entropy_control): none, clip_cov,
    kl_cov (arXiv 2505.22617) or high_entropy (the 80/20 rule, arXiv 2506.01939)."""
    cov_fraction: float = 2e-4
    """Clip-Cov / KL-Cov: share of a micro-batch's tokens acted on (paper: 2e-4 Clip-Cov, 2e-3 KL-Cov)."""
    clip_cov_low: float = 1.0
    """Clip-Cov: lowest covariance (log pi_t - mean)(A_t - mean) of a token it may detach."""
    clip_cov_high: float = 5.0
    """Clip-Cov: highest covariance of a token it may detach."""
    kl_cov_coef: float = 1.0
    """KL-Cov: weight of |log pi - log pi_old| on its selected tokens."""
    entropy_top_fraction: float = 0.2
    """80/20 rule: share of a micro-batch's tokens, highest entropy first, that keep the policy gradient."""
    ref_reset_every: int = 0
    """Iterative GRPO (paper sec. 4.1.3): reset pi_ref to the current policy every N steps (0 = never)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more prompts
    until prompts_per_step informative groups are found (or the round cap is hit)."""
    dynamic_sampling_max_rounds: int = 3
    """Extra sampling rounds a step may spend on dynamic sampling before training on what it has."""
    shared_prompt_forward: bool = True
    """The G completions of a group share their prompt: encode it once in the policy and reference
    forward passes and reuse its key/value cache for them (exact: same log-probs and gradients;
    reasoning_rl.policy.logprobs; with micro-batches that cut groups, once per gcd(micro_batch_size, G)
    rows, docs/grpo.md). false = every row runs prompt + completion in full."""

    def problems(self) -> list[str]:
        out = super().problems()
        if self.group_size < 2:
            out.append(f"algo.group_size must be >= 2 (group statistics need 2 samples), got {self.group_size}")
        if self.advantage not in ADVANTAGE_ESTIMATORS:
            out.append(f"algo.advantage={self.advantage!r} is unknown; choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
        if self.std not in STD_MODES:
            out.append(f"algo.std={self.std!r} is unknown; choose one of {', '.join(STD_MODES)}")
        if self.beta < 0:
            out.append(f"algo.beta must be >= 0, got {self.beta}")
        if self.kl_estimator not in KL_ESTIMATORS:
            out.append(f"algo.kl_estimator={self.kl_estimator!r} is unknown; choose one of {sorted(KL_ESTIMATORS)}")
        if self.ratio_level not in ("token", "sequence"):
            out.append(f"algo.ratio_level={self.ratio_level!r} is unknown; choose token or sequence")
        if self.policy_loss not in POLICY_LOSSES:
            out.append(f"algo.policy_loss={self.policy_loss!r} is unknown; choose one of {sorted(POLICY_LOSSES)}")
        elif self.policy_loss != "clip" and (self.ratio_level != "token" or self.dual_clip_c):
            out.append(f"algo.policy_loss={self.policy_loss} takes per-token ratios and no dual clip; "
                       f"set algo.ratio_level=token and algo.dual_clip_c=0 (or algo.policy_loss=clip)")
        if self.dual_clip_c and self.dual_clip_c <= 1:
            out.append(f"algo.dual_clip_c must be 0 (off) or > 1 (verl uses 3), got {self.dual_clip_c}")
        if self.kl_placement not in KL_PLACEMENTS:
            out.append(f"algo.kl_placement={self.kl_placement!r} is unknown; choose one of {', '.join(KL_PLACEMENTS)}")
        elif self.kl_placement == "reward" and self.kl_estimator != "k1":
            out.append(f"algo.kl_placement=reward takes the k1 estimator (a detached log-ratio reward), got "
                       f"algo.kl_estimator={self.kl_estimator}; set algo.kl_estimator=k1")
        if self.entropy_control not in ENTROPY_CONTROLS:
            out.append(f"algo.entropy_control={self.entropy_control!r} is unknown; "
                       f"choose one of {', '.join(ENTROPY_CONTROLS)}")
        if self.entropy_control == "kl_cov" and self.num_iterations == 1:
            # With one update per batch pi_old is pi_theta detached: |log pi - log pi_old| is 0 with gradient 0.
            out.append("algo.entropy_control=kl_cov does nothing with algo.num_iterations=1 (its penalty "
                       "|log pi - log pi_old| is 0 when each batch is used once); set algo.num_iterations=2 or more")
        if self.clip_cov_low > self.clip_cov_high:
            out.append(f"algo.clip_cov_low={self.clip_cov_low} is above algo.clip_cov_high={self.clip_cov_high}: "
                       f"no token could be picked; swap them")
        if self.advantage == "pass_at_k" and self.pass_k > self.group_size:
            out.append(f"algo.pass_k={self.pass_k} exceeds algo.group_size={self.group_size}: "
                       f"a group has no {self.pass_k}-subsets; lower algo.pass_k or raise algo.group_size")
        if self.ref_reset_every < 0 or self.dynamic_sampling_max_rounds < 0:
            out.append("algo.ref_reset_every and algo.dynamic_sampling_max_rounds must be >= 0")
        return out

    def fsdp_problems(self) -> list[str]:
        """GRPO and its variants (dr_grpo, gspo, rloo, reinforce_pp, dapo's loss) shard with FSDP2:
        every rank trains on its share of the groups, the same number of forward/backward passes
        (tests/reasoning_rl/test_distributed.py). Two settings break that or are not built."""
        out = []
        if self.dynamic_sampling:
            out.append("trainer.fsdp=true with algo.dynamic_sampling=true is not supported: ranks may keep different "
                       "numbers of groups, hence run different numbers of forward/backward passes, and FSDP's "
                       "collectives would wait forever; set algo.dynamic_sampling=false")
        if self.ref_reset_every:
            out.append("trainer.fsdp=true with algo.ref_reset_every > 0 is not supported (resetting and saving a "
                       "sharded reference is not built); set algo.ref_reset_every=0")
        return out
