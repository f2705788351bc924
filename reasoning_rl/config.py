"""Typed configuration of a training run; mirrored by the YAML files in ``conf/``.

Each group (``task``, ``model``, ``algo``, ``rollout``, ``trainer``, ``warmstart``,
``evaluation``) is a dataclass with a docstring per field. The schemas are
registered with Hydra's ConfigStore (``reasoning_rl.cli``), so a typo in an
override or a wrong type fails at composition time with the key's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reasoning_rl.models import ModelConfig
from reasoning_rl.tasks import TaskConfig


@dataclass
class AlgoConfig:
    """The policy-optimisation algorithm (GRPO and its variants)."""

    name: str = "grpo"
    """Algorithm name (for logs); the variants are selected by the fields below."""
    prompts_per_step: int = 8
    """Distinct prompts per optimisation step."""
    group_size: int = 8
    """G: completions sampled per prompt."""
    beta: float = 0.04
    """Weight of the KL(pi_theta || pi_ref) penalty; 0 = no reference model is loaded at all."""
    eps_low: float = 0.2
    """Lower clip range: ratio is clipped at 1 - eps_low."""
    eps_high: float = 0.2
    """Upper clip range: ratio is clipped at 1 + eps_high (DAPO's clip-higher uses 0.28)."""
    advantage: str = "grpo"
    """Advantage estimator: grpo, dr_grpo or rloo (reasoning_rl.algo.advantages)."""
    std: str = "population"
    """GRPO's scale: population (paper's worked example), unbiased (TRL/verl), batch, none."""
    adv_eps: float = 1e-6
    """eps in A_i = (r_i - mean) / (std + eps)."""
    loss_aggregation: str = "sequence_mean"
    """sequence_mean (paper), token_mean (DAPO) or constant (Dr. GRPO)."""
    num_iterations: int = 1
    """mu: optimisation steps on each batch of rollouts (old log-probs kept from sampling time)."""
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


@dataclass
class RolloutConfig:
    """How completions are sampled and scored."""

    backend: str = "hf"
    """hf (transformers generate) or vllm (optional extra, GPU)."""
    temperature: float = 1.0
    """Sampling temperature (also applied to the training log-probs)."""
    top_p: float = 1.0
    """Nucleus sampling (1.0 = off)."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    max_new_tokens: int = 256
    """Longest completion in tokens."""
    batch_size: int = 64
    """Sequences per generate call."""
    stop: list[str] = field(default_factory=list)
    """Extra stop strings."""
    reward_timeout: float = 10.0
    """Hard wall-clock limit per verifier call, in seconds (the item is killed after it)."""
    reward_workers: int | None = None
    """Verifier worker processes (null = one per core; 0 = in-process, no timeout)."""


@dataclass
class TrainerConfig:
    """Run length, seeds, checkpoints and logging."""

    steps: int = 100
    """GRPO optimisation steps."""
    seed: int = 0
    """Seed of data order, sampling and initialisation of everything random."""
    output_dir: str | None = None
    """Run folder (null = Hydra's output folder for this run)."""
    save_every: int = 50
    """Checkpoint every N steps (and always at the end); 0 = only at the end."""
    keep_checkpoints: int | None = 3
    """Keep the N newest checkpoints (null = all)."""
    resume: bool = False
    """Continue from the newest complete checkpoint in output_dir."""
    log_completions: bool = True
    """Write every completion with its reward and advantage to completions.jsonl."""
    tensorboard: bool = True
    """Also log to TensorBoard when it is installed."""
    progress_bar: bool = True
    """Show a tqdm progress bar."""
    num_threads: int | None = None
    """torch.set_num_threads (null = torch's default)."""
    shared_prompt_forward: bool = True
    """Encode each group's prompt once in the policy and reference forward passes and
    reuse its key/value cache for the G completions (exact: same log-probs and gradients;
    reasoning_rl.logprobs). false = every row runs prompt + completion in full."""


@dataclass
class WarmStartConfig:
    """Supervised warm start on the task's references before RL (RL needs a policy that is sometimes right)."""

    enabled: bool = False
    """Run the supervised phase before GRPO."""
    max_steps: int = 300
    """Upper bound on supervised steps."""
    batch_size: int = 32
    """Sequences per supervised step."""
    learning_rate: float = 1e-3
    """AdamW learning rate of the supervised phase."""
    stop_at_accuracy: float = 0.3
    """Stop as soon as greedy accuracy on a probe set of training problems reaches this (partial on purpose)."""
    check_every: int = 20
    """Probe the accuracy every N steps."""
    probe_size: int = 64
    """Training problems in the accuracy probe."""
    target_suffix: str = ""
    """Text appended to the reference to form the supervised target (before EOS)."""


@dataclass
class EvalConfig:
    """Held-out evaluation of the policy before and after GRPO."""

    enabled: bool = True
    """Evaluate on the task's eval split before and after GRPO."""
    num_examples: int = 200
    """Held-out problems (at most the eval split's size)."""
    samples_per_problem: int = 4
    """Samples per problem for the sampled accuracy (at the training temperature)."""
    every: int = 0
    """Also evaluate every N steps during GRPO (0 = only before/after)."""


@dataclass
class TrainConfig:
    """A full training run: ``reasoning-rl-train`` composes this from ``conf/``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)


def validate(cfg: TrainConfig) -> None:
    """Reject settings that would fail later or silently do something else."""
    from reasoning_rl.algo import ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS

    a = cfg.algo
    problems = []
    if a.group_size < 2:
        problems.append(f"algo.group_size must be >= 2 (group statistics need 2 samples), got {a.group_size}")
    if a.prompts_per_step < 1:
        problems.append(f"algo.prompts_per_step must be >= 1, got {a.prompts_per_step}")
    if a.advantage not in ADVANTAGE_ESTIMATORS:
        problems.append(f"algo.advantage={a.advantage!r} is unknown; choose one of {sorted(ADVANTAGE_ESTIMATORS)}")
    if a.loss_aggregation not in LOSS_AGGREGATIONS:
        problems.append(f"algo.loss_aggregation={a.loss_aggregation!r} is unknown; choose one of {sorted(LOSS_AGGREGATIONS)}")
    if a.std not in ("population", "unbiased", "batch", "none"):
        problems.append(f"algo.std={a.std!r} is unknown; choose population, unbiased, batch or none")
    if a.num_iterations < 1:
        problems.append(f"algo.num_iterations must be >= 1, got {a.num_iterations}")
    if a.beta < 0:
        problems.append(f"algo.beta must be >= 0, got {a.beta}")
    if not (0 <= a.eps_low < 1) or a.eps_high < 0:
        problems.append(f"need 0 <= algo.eps_low < 1 and algo.eps_high >= 0, got {a.eps_low}, {a.eps_high}")
    if a.lr_schedule not in ("constant", "linear", "cosine"):
        problems.append(f"algo.lr_schedule={a.lr_schedule!r} is unknown; choose constant, linear or cosine")
    if a.micro_batch_size < 1:
        problems.append(f"algo.micro_batch_size must be >= 1, got {a.micro_batch_size}")
    if cfg.rollout.temperature <= 0:
        problems.append(f"rollout.temperature must be > 0 for sampling, got {cfg.rollout.temperature}")
    if cfg.trainer.steps < 0:
        problems.append(f"trainer.steps must be >= 0, got {cfg.trainer.steps}")
    if problems:
        raise ValueError("invalid configuration:\n  - " + "\n  - ".join(problems))


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (``train_schema`` is the primary
    config's first default, so every composed run is type-checked against TrainConfig)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
