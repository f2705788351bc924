"""What an algorithm module plugs into the shared run loop (``reasoning_rl.trainer``).

The run loop owns everything that is the same for every algorithm: the run folder,
the model and tokenizer, the rollout engine, the task's examples and reward, the
data order, resume, checkpoints, held-out evaluation, logging and the summary. An
algorithm owns what differs: its models beyond the policy (reference, critic), its
optimiser, and one optimisation step. It is a subclass of :class:`Algorithm` with
a config dataclass derived from :class:`AlgoConfig`, registered by name
(``reasoning_rl.algo.registry``); ``algo.name`` in the config picks it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from reasoning_rl.algo.aggregation import LOSS_AGGREGATIONS
from reasoning_rl.algo.corrections import CorrectionConfig
from reasoning_rl.algo.losses import KLPenaltyConfig
from reasoning_rl.algo.policy_objectives import ClipRangeConfig
from reasoning_rl.reward_guard import RewardGuard
from reasoning_rl.settings.algo import AlgoConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    from reasoning_rl.rollouts.prompt_sampler import PromptSampler
    from reasoning_rl.rollouts.sampling import Request, RolloutEngine, SamplingConfig
    from reasoning_rl.tasks import Example
    from rewards.compose import CompositeReward
    from rewards.pool import WorkerPool


@dataclass
class ClippedPolicyConfig(AlgoConfig):
    """Settings every algorithm with PPO's clipped policy objective has (GRPO, PPO): the groups
    ``algo.policy_loss``, ``algo.kl`` and ``algo.correction``."""

    group_size: int = 8
    """Completions sampled per prompt."""
    policy_loss: ClipRangeConfig = field(default_factory=ClipRangeConfig)
    """The clipped objective's settings (``reasoning_rl.algo.losses``)."""
    kl: KLPenaltyConfig = field(default_factory=KLPenaltyConfig)
    """The KL(pi_theta || pi_ref) penalty (``reasoning_rl.algo.losses``)."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """The off-policy correction of the policy loss (``reasoning_rl.algo.corrections``, docs/offpolicy.md)."""
    loss_aggregation: str = "sequence_mean"
    """How per-token losses become one: sequence_mean (paper), token_mean (DAPO) or constant (Dr. GRPO)."""
    num_iterations: int = 1
    """mu (PPO's epochs): optimisation steps on each batch of rollouts (old log-probs kept from sampling time)."""

    def problems(self) -> list[str]:
        out = super().problems() + self.policy_loss.problems() + self.kl.problems() + self.correction.problems()
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            out.append(f"algo.loss_aggregation={self.loss_aggregation!r} is unknown; "
                       f"choose one of {sorted(LOSS_AGGREGATIONS)}")
        if self.num_iterations < 1:
            out.append(f"algo.num_iterations must be >= 1, got {self.num_iterations}")
        return out

    def samples_per_prompt(self) -> int:
        return self.group_size

    def uses_reference(self) -> bool:
        return self.kl.beta != 0.0

    def keeps_old_logprobs(self) -> bool:
        return self.num_iterations > 1


@dataclass
class RunContext:
    """What the run loop hands an algorithm: built once, shared, never re-created by it."""

    cfg: Any
    """The run's ``reasoning_rl.config.TrainConfig``. Not imported here, even for typing:
    ``reasoning_rl.config`` imports the algorithm configs of this package, and an import of it
    from here would close a loop config -> algo.base -> config."""
    run_dir: Path
    model: Any
    """The policy pi_theta (a transformers causal LM), on ``device``."""
    tokenizer: Any
    device: Any
    engine: RolloutEngine
    """Samples completions from the current policy."""
    sampling: SamplingConfig
    reward: CompositeReward
    """The task's reward; its first component defines accuracy."""
    pool: WorkerPool
    """Verifier worker processes (hard timeouts)."""
    train_examples: list[Example]
    sampler: PromptSampler
    """Which training examples come next (its position is checkpointed by the run loop)."""
    resumed: bool = False
    """True when the run continues from a checkpoint."""
    reward_guard: RewardGuard = field(default_factory=RewardGuard)
    """Stops the run when the reward's verifiers fail on too many items (reasoning_rl.reward_guard);
    fed every training batch's scores by :func:`reasoning_rl.algo.groups.sample_and_score`."""


@dataclass
class StepOutput:
    """One optimisation step's result, for the run loop to log."""

    metrics: dict[str, float]
    """Namespaced metrics (docs/metrics.md); ``completion/tokens`` feeds the throughput."""
    completions: list[dict[str, Any]] = field(default_factory=list)
    """Rows for ``completions.jsonl`` (one per sampled completion)."""


class GeneratorReference(Protocol):
    """pi_ref as an algorithm offers it to the asynchronous generator (:meth:`Algorithm.generator_reference`):
    the frozen model and its log-probs of completions computed as the update computes them
    (the grpo module's is reasoning_rl.algo.batch.ReferenceJob)."""

    model: Any

    def logprobs(self, completions: Sequence[Any], sampling: Any) -> list[list[float]]: ...


class Algorithm(ABC):
    """One training algorithm. The run loop calls :meth:`setup` once (after the warm
    start), then :meth:`step` ``trainer.steps`` times, and saves :meth:`state_dict` in
    every checkpoint."""

    label: ClassVar[str] = "RL"
    """How logs and the before/after table name the phase ("GRPO")."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cfg: Any = ctx.cfg.algo

    @abstractmethod
    def setup(self, state: dict[str, Any] | None) -> None:
        """Build optimiser and extra models; ``state`` is the checkpoint's state when resuming."""

    @abstractmethod
    def step(self, step: int) -> StepOutput:
        """Run optimisation step number ``step`` (0-based) and return what to log."""

    def held_models(self) -> list[Any]:
        """Models this algorithm holds besides the policy (reference, critic): counted in memory reports."""
        return []

    def optimizers(self) -> list[Any]:
        """This algorithm's optimisers: their states are counted in memory reports."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must hold to resume this algorithm (optimiser, scheduler, ...)."""
        return {}

    def close(self) -> None:  # noqa: B027 -- optional hook, not abstract
        """Release what :meth:`setup` acquired (nothing by default)."""

    def samples_per_prompt(self) -> int:
        """How many completions a step samples of each prompt, as its settings say (``AlgoConfig``'s
        :meth:`~AlgoConfig.samples_per_prompt`): the policy runtime check samples that many, at most 4
        (reasoning_rl.policy.runtime_check)."""
        return self.cfg.samples_per_prompt()

    def next_request(self, step: int, examples: Sequence[Example]) -> Request | None:
        """What :meth:`step` number ``step`` will sample from ``examples`` (the prompt sampler's examples of
        that step), said ahead of time so that an asynchronous generator can sample it meanwhile
        (``rollout.max_staleness``, reasoning_rl.rollouts.stack). None by default: this algorithm does
        not say, and nothing is sampled ahead of it."""
        return None

    def generator_reference(self) -> GeneratorReference | None:
        """pi_ref and how :meth:`step` computes its log-probs, offered to the asynchronous generator
        (``rollout.max_staleness``, reasoning_rl.rollouts.stack) so that it computes them for its completions
        while the update runs. None by default: the update computes them (or there is no pi_ref)."""
        return None
