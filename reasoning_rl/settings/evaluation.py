"""``evaluation``: held-out accuracy before, during and after RL, KL to the base, retention; ``warmstart``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RetentionConfig:
    """Held-out accuracy on a second task before and after training (``evaluation.retention.*``)."""

    task: str | None = None
    """The second task: a definition of ``reasoning_rl/tasks/definitions/`` (``code_synthetic``, ``gsm8k``) or
    the path of a definition YAML; null = no retention evaluation."""
    split: str | None = None
    """Its split to evaluate on; null = the definition's ``eval_split``."""
    num_examples: int = 50
    """Problems evaluated (the split's first N)."""
    samples_per_problem: int = 4
    """Sampled completions per problem (sampled accuracy, Pass@K, Maj@K); the greedy one comes on top."""
    data_file: str | None = None
    """Local copy (JSON, JSONL or Parquet) of that split; null = its file in ``task.data_dir``, or its generator."""
    max_new_tokens: int | None = None
    """Completion length on the second task; null = ``rollout.max_new_tokens``."""
    stop: list[str] | None = None
    """Stop strings on the second task; null = the definition's ``stop`` with raw prompts, else ``rollout.stop``."""


@dataclass
class WarmStartConfig:
    """Supervised warm start on the task's references before RL (RL needs a policy that is sometimes right)."""

    enabled: bool = False
    """Run the supervised phase before GRPO."""
    max_steps: int = 800
    """Upper bound on supervised steps."""
    batch_size: int = 32
    """Sequences per supervised step."""
    learning_rate: float = 1e-3
    """AdamW learning rate of the supervised phase."""
    stop_at_accuracy: float = 0.3
    """Stop as soon as greedy accuracy on a probe set of training problems reaches this (partial on purpose)."""
    check_every: int = 10
    """Probe the accuracy every N steps."""
    probe_size: int = 64
    """Training problems in the accuracy probe."""
    target_suffix: str = ""
    """Text appended to the reference to form the supervised target (before EOS)."""
    target: str = "reference"
    """What the supervised phase trains on: ``reference`` (the answer) or ``solution`` (the definition's
    ``reference_completion``, e.g. a whole tool episode for ``task=multiply_tool``)."""
    mask_observations: bool = False
    """Leave the environment's observations (``task.env``'s ``observation_spans`` of each target: python_tool's
    output blocks, code_feedback's feedback lines and retry prompt) out of the supervised loss, as RL's loss
    mask does; false trains on the whole target text (needs ``task.env`` when true)."""


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
    kl_to_base_every: int = 0
    """Log kl/base_forward, the per-token forward KL(pi_0 || pi) from the policy as RL starts to the
    current one, every N steps (0 = off; reasoning_rl.evaluation.kl_to_base). Its probe's completions are sampled
    once from pi_0 and their pi_0 log-probs stored, so no copy of pi_0 is held; each measurement is one
    no-grad forward of the policy over the probe."""
    kl_to_base_prompts: int = 16
    """Prompts in the KL probe, drawn once (seeded by trainer.seed) from the eval split (the train split
    when the task has none)."""
    kl_to_base_samples: int = 4
    """Completions sampled from pi_0 per probe prompt."""
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    """Held-out accuracy on a second task before and after training (reasoning_rl.evaluation.retention); off by default."""
