"""``algo``: the settings every algorithm has (:class:`AlgoConfig`) and what an algorithm declares it
supports (:class:`Capabilities`). Each algorithm's own settings subclass :class:`AlgoConfig` beside its
module in ``reasoning_rl/algo/`` (``GRPOConfig`` in ``grpo_config.py``), as a plugin's would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

LR_SCHEDULES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm's code is built and tested for. Generic code (the compatibility rules of
    ``reasoning_rl.compat``, the planner, the preflight) asks these, never an algorithm's field names."""

    samples_groups: bool = False
    """Its step samples ``group_size`` completions per prompt from the policy and scores them (the preflight
    can sample one such batch ahead of training)."""
    mixed_precision: bool = False
    """Its update runs under ``trainer.precision`` bf16/fp16 (reasoning_rl.policy.precision)."""
    lora: bool = False
    """It trains a peft adapter with the base as its reference (``model.lora.r > 0``, reasoning_rl.policy.lora)."""
    async_rollouts: bool = False
    """Its step samples once, ``prompts_per_step`` x ``group_size`` with the policy at ``step_seed(seed, step)``
    (reasoning_rl.algo.batch.sample_step), so that a generator process can run ahead of it
    (``rollout.max_staleness``, reasoning_rl.rollouts.async_engine)."""
    fsdp: bool = False
    """Every rank runs the same number of forward/backward passes and only the models the run loop shards
    (policy, reference) are trained, as FSDP's collectives need (``trainer.fsdp=true``)."""
    fsdp_blocker: str = ("a rank without samples to learn from skips its forward and backward passes, which "
                         "FSDP's per-layer collectives cannot allow")
    """Why ``trainer.fsdp=true`` cannot train it, when ``fsdp`` is False (the refusal says it)."""


@dataclass
class AlgoConfig:
    """Settings every algorithm has: which one, how many prompts a step, the optimiser."""

    name: str = "grpo"
    """The algorithm module (``reasoning_rl.algo.registry``): ``grpo``, ..."""
    variant: str = "grpo"
    """The preset's name (``algo=dapo`` runs the grpo module with DAPO's settings); for logs and reports."""
    prompts_per_step: int = 8
    """Distinct prompts per optimisation step."""
    micro_batch_size: int = 32
    """Sequences per forward/backward pass (gradient accumulation covers the rest)."""
    learning_rate: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.99
    """AdamW beta2."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (0 = off)."""
    lr_schedule: str = "constant"
    """constant, linear (decay to 0) or cosine; after warmup."""
    lr_warmup_steps: int = 0
    """Linear warmup steps."""

    def problems(self) -> list[str]:
        """What is wrong with these settings (empty when nothing is); subclasses add theirs."""
        out = []
        if self.prompts_per_step < 1:
            out.append(f"algo.prompts_per_step must be >= 1, got {self.prompts_per_step}")
        if self.micro_batch_size < 1:
            out.append(f"algo.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.lr_schedule not in LR_SCHEDULES:
            out.append(f"algo.lr_schedule={self.lr_schedule!r} is unknown; choose one of {', '.join(LR_SCHEDULES)}")
        if self.learning_rate < 0 or self.lr_warmup_steps < 0:
            out.append(f"algo.learning_rate and algo.lr_warmup_steps must be >= 0, got "
                       f"{self.learning_rate}, {self.lr_warmup_steps}")
        return out

    capabilities: ClassVar[Capabilities] = Capabilities()
    """What the algorithm supports (:class:`Capabilities`); the compatibility rules read it."""

    # -- what these settings make the algorithm do, for generic code (never read its fields by name) --
    def samples_per_prompt(self) -> int:
        """Completions a step samples per prompt (1 for an algorithm that samples none)."""
        return 1

    def uses_reference(self) -> bool:
        """Whether a frozen reference model pi_ref is loaded."""
        return False

    def reference_changes(self) -> bool:
        """Whether pi_ref is reset to the policy during the run (iterative GRPO)."""
        return False

    def resamples(self) -> bool:
        """Whether a step may sample extra rounds, decided by what it scored (DAPO's dynamic sampling)."""
        return False

    def varies_passes(self) -> bool:
        """Whether the update leaves some rows out of its forward/backward passes, decided by what the step
        scored (GRPO's skip_zero_advantage_groups): ranks may then run different numbers of passes."""
        return False

    def keeps_old_logprobs(self) -> bool:
        """Whether the update holds pi_old's log-probs of the batch (more than one update per batch)."""
        return False

    def shares_prompt_forward(self) -> bool:
        """Whether the G completions of a group encode their shared prompt once (reasoning_rl.policy.logprobs)."""
        return False
