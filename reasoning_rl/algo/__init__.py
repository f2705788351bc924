"""Algorithms: the math as small pure functions (``advantages``, ``losses``), and one module
per algorithm (``grpo``) plugged into the shared run loop through ``registry``."""

from reasoning_rl.algo.advantages import (
    ADVANTAGE_ESTIMATORS,
    STD_MODES,
    compute_advantages,
    dr_grpo_advantages,
    group_std,
    grpo_advantages,
    rloo_advantages,
    zero_std_fraction,
)
from reasoning_rl.algo.aggregation import (
    LOSS_AGGREGATIONS,
    LossNormalizer,
    aggregate,
    constant_normalizer,
    masked_sum,
    sequence_mean,
    token_mean,
)
from reasoning_rl.algo.base import Algorithm, RunContext, StepOutput
from reasoning_rl.algo.losses import LossOutput, grpo_loss, kl_k3
from reasoning_rl.algo.policy_objectives import clipped_surrogate, policy_ratio
from reasoning_rl.algo.registry import (
    AlgorithmNotFoundError,
    get_algorithm,
    list_algorithms,
    register_algorithm,
)
from reasoning_rl.settings.algo import AlgoConfig

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "STD_MODES",
    "AlgoConfig",
    "Algorithm",
    "AlgorithmNotFoundError",
    "LossNormalizer",
    "LossOutput",
    "RunContext",
    "StepOutput",
    "aggregate",
    "clipped_surrogate",
    "compute_advantages",
    "constant_normalizer",
    "dr_grpo_advantages",
    "get_algorithm",
    "group_std",
    "grpo_advantages",
    "grpo_loss",
    "kl_k3",
    "list_algorithms",
    "masked_sum",
    "policy_ratio",
    "register_algorithm",
    "rloo_advantages",
    "sequence_mean",
    "token_mean",
    "zero_std_fraction",
]
