"""The math of the algorithms: advantages and losses, each a small pure function."""

from reasoning_rl.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    compute_advantages,
    dr_grpo_advantages,
    group_std,
    grpo_advantages,
    rloo_advantages,
    zero_std_fraction,
)
from reasoning_rl.algo.losses import (
    LOSS_AGGREGATIONS,
    LossOutput,
    clipped_surrogate,
    constant_normalizer,
    grpo_loss,
    kl_k3,
    microbatch_weight,
    policy_ratio,
    sequence_mean,
    token_mean,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "LossOutput",
    "clipped_surrogate",
    "compute_advantages",
    "constant_normalizer",
    "dr_grpo_advantages",
    "group_std",
    "grpo_advantages",
    "grpo_loss",
    "kl_k3",
    "microbatch_weight",
    "policy_ratio",
    "rloo_advantages",
    "sequence_mean",
    "token_mean",
    "zero_std_fraction",
]
