"""reasoning-rl reward layer: verifiers, their registry, and parallel batch scoring.

The contract (see :mod:`rewards.types`): a verifier is called as
``verifier(completion, reference, **fields)`` and returns a :class:`VerifierResult`
with ``score`` (``None`` when the sample cannot be scored, never silently 0),
``status`` (``ok``/``unscorable``/``timeout``/``error``) and ``info``.

Importing this package is cheap: the math and code verifiers (SymPy, the sandbox)
load on first use through :func:`get_verifier` or ``import rewards.math``.
"""

from rewards.batch import BatchScores, score_batch
from rewards.builtin import FormatReward, OverlongPenalty, overlong_penalty
from rewards.compose import CompositeReward, CompositeScores, combine_scores
from rewards.pool import CallOutcome, WorkerPool, default_pool, run_with_timeout
from rewards.registry import (
    ENTRY_POINT_GROUP,
    VerifierNotFoundError,
    get_verifier,
    list_verifiers,
    register_verifier,
    reload_entry_points,
    unregister_verifier,
)
from rewards.specs import RewardSpec
from rewards.types import STATUSES, Status, Verifier, VerifierResult, as_result

__all__ = [
    "ENTRY_POINT_GROUP",
    "STATUSES",
    "BatchScores",
    "CallOutcome",
    "CompositeReward",
    "CompositeScores",
    "FormatReward",
    "OverlongPenalty",
    "RewardSpec",
    "Status",
    "Verifier",
    "VerifierNotFoundError",
    "VerifierResult",
    "WorkerPool",
    "as_result",
    "combine_scores",
    "default_pool",
    "get_verifier",
    "list_verifiers",
    "overlong_penalty",
    "register_verifier",
    "reload_entry_points",
    "run_with_timeout",
    "score_batch",
    "unregister_verifier",
]
