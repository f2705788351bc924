"""Typed configuration of a training run; mirrored by the YAML files in ``conf/``.

Each group (``task``, ``model``, ``algo``, ``rollout``, ``trainer``, ``warmstart``,
``evaluation``) is a dataclass with a docstring per field; the defaults here are the
values of ``conf/train.yaml`` and the default group files (a test checks they agree).
``algo`` is typed by the chosen algorithm's own dataclass (``GRPOConfig`` in
``reasoning_rl/algo/grpo_config.py``), a subclass of ``AlgoConfig``. The schemas are
registered with Hydra's ConfigStore (:func:`register_configs`), so a typo in an
override or a wrong type fails at composition time with the key's name; a key added
with ``+`` that no schema knows is refused by :func:`key_problems`, and every value is
checked by :func:`validate` (ranges in ``reasoning_rl.config_checks``) before a run
writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from reasoning_rl.algo.base import AlgoConfig
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.algo.registry import get_algorithm, list_algorithms
from reasoning_rl.evaluation.retention import RetentionConfig
from reasoning_rl.health.config import HealthConfig
from reasoning_rl.policy.loading import ModelConfig
from reasoning_rl.rollouts.inject import InjectConfig
from reasoning_rl.tasks import TaskConfig
from reasoning_rl.trackers.base import TrackingConfig


@dataclass
class RolloutConfig:
    """How completions are sampled and scored."""

    backend: str = "hf"
    """hf (transformers generate), native (our decode loop) or vllm (optional extra, GPU;
    reasoning_rl/policy/vllm.py, docs/scaling.md)."""
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
    vllm_gpu_memory_utilization: float = 0.3
    """backend=vllm: share of the GPU's memory vLLM may take (its weights + KV cache); the rest is the trainer's."""
    vllm_sleep_mode: bool | None = None
    """backend=vllm: put the engine to sleep while the trainer updates (frees its KV cache and, at
    level 1, moves its weights to CPU memory); woken before the weight sync and generation.
    null = where vLLM has sleep mode (CUDA: on; CPU: off, which the log says)."""
    vllm_sleep_level: int = 1
    """backend=vllm: 1 (weights kept in CPU memory) or 2 (weights dropped, reloaded from the trainer)."""
    vllm_sync_timeout: float = 300.0
    """backend=vllm: seconds a weight sync may take; longer stops the run with a TimeoutError."""
    vllm_dtype: str | None = None
    """backend=vllm: the engine's dtype (float32, bfloat16, ...); null = the trainer's. Both are logged."""
    vllm_max_model_len: int | None = None
    """backend=vllm: longest prompt + completion the engine plans its KV cache for (null = the model's)."""
    vllm_enforce_eager: bool = False
    """backend=vllm: no CUDA graphs (slower decoding, faster start, less memory)."""
    vllm_check_logprobs: bool = True
    """backend=vllm: compare the engine's log-probs of the sampled tokens with the trainer's every step
    (one extra no-grad forward): rollout/logprob_mismatch_mean and _max."""
    max_staleness: int = 0
    """Asynchronous rollouts: sample each step's batch in a generator process, with the weights of exactly
    max(0, step - k) updates, overlapping the trainer's update (reasoning_rl.rollouts.async_engine, docs/offpolicy.md;
    hf or native, grpo or ppo). 0 = the synchronous loop."""
    inject: InjectConfig = field(default_factory=InjectConfig)
    """A sampler/trainer mismatch made on purpose (stale weights, lower precision, weight noise, a hidden
    temperature) for comparing off-policy corrections (reasoning_rl.rollouts.inject, docs/offpolicy.md)."""


@dataclass
class TrainerConfig:
    """Run length, seeds, checkpoints and logging."""

    steps: int = 200
    """Optimisation steps of the algorithm."""
    seed: int = 0
    """Seed of data order, sampling and initialisation of everything random."""
    output_dir: str | None = None
    """Run folder (null = Hydra's output folder for this run)."""
    save_every: int = 100
    """Checkpoint every N steps (and always at the end); 0 = only at the end."""
    keep_checkpoints: int | None = 3
    """Keep the N newest checkpoints (null = all)."""
    resume: bool | None = None
    """Continue from the newest complete checkpoint in output_dir. null (default): resume an incomplete
    run with the same settings found there, saying so; true: resume (a warning when there is nothing
    to resume); false: start over, the earlier run's files moved to output_dir/.replaced/<time>/
    (reasoning_rl.run_folder.lock, docs/sweeps.md)."""
    log_completions: bool = True
    """Write every completion with its reward and advantage to completions.jsonl."""
    tensorboard: bool = True
    """Also log to TensorBoard when it is installed (and ``tensorboard`` is in ``loggers``)."""
    loggers: list[str] = field(default_factory=lambda: ["tensorboard"])
    """Experiment trackers besides metrics.jsonl: tensorboard, wandb (extra .[wandb]), mlflow (extra .[mlflow]);
    reasoning_rl.trackers, docs/trackers.md."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """Where wandb and mlflow write: project, run name, MLflow URI, W&B mode (docs/trackers.md)."""
    progress_bar: bool = True
    """Show a tqdm progress bar."""
    num_threads: int | None = None
    """torch.set_num_threads (null = torch's default)."""
    keep_freed_memory: bool | None = None
    """glibc malloc's handling of freed memory (reasoning_rl.memory.allocator_choice): true keeps every
    freed block under 32 MiB for reuse (a step's activations reuse pages instead of faulting fresh ones
    in: 2200-2500 page faults a step on the benchmark workload, ~3 us each); false hands blocks of 1 MiB
    or more back to the kernel (resident memory follows the live tensors: at SmolLM2-135M's size with
    checkpointing, about half the peak); null (auto) keeps them for a policy under 50M parameters on the
    CPU and returns them from that size up. Process-wide; results are unchanged; no effect off glibc."""
    fsdp: bool = False
    """Under torchrun, shard the policy and the reference over the ranks with PyTorch's FSDP2 (one
    unit per decoder layer plus the root) instead of holding a whole copy on each: for models whose
    training state does not fit one device. Same update as one process; checkpoints are ordinary
    save_pretrained folders. The grpo module only, hf/native rollouts (docs/scaling.md). No effect
    in a single process."""
    max_failed_reward_share: float = 0.5
    """The run stops (exit code 2, status failed) when more than this share of a verifier's items fail
    (error, timeout) over failed_reward_window training steps, or in a held-out evaluation or
    warm-start probe; a batch where every item fails stops it at once (reasoning_rl.reward_guard)."""
    failed_reward_window: int = 10
    """Training steps the failed share of max_failed_reward_share is measured over."""
    precision: str = "fp32"
    """Compute precision of the training forward: fp32, bf16 (autocast) or fp16 (autocast + loss
    scaling); master weights and optimiser states stay float32 (reasoning_rl.policy.precision, docs/lora.md)."""
    health: HealthConfig = field(default_factory=HealthConfig)
    """Health rules read every step's metrics and warn (or stop the run) on the known silent failures:
    truncation, zero-variance groups, entropy collapse, KL runaway, NaN... (reasoning_rl.health, docs/health.md)."""


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


@dataclass
class TrainConfig:
    """A full training run: ``reasoning-rl-train`` composes this from ``conf/``."""

    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algo: AlgoConfig = field(default_factory=GRPOConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    warmstart: WarmStartConfig = field(default_factory=WarmStartConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore.

    ``train_schema`` (the primary config's first default) types every group but ``algo``,
    which it leaves at the base ``AlgoConfig`` so that any algorithm's settings can merge
    into it; each algorithm's dataclass is stored as ``algo/<name>_schema``, and its YAML
    file lists that first (``conf/algo/grpo.yaml``), so ``algo.*`` is typed too."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig(algo=AlgoConfig()))
    for name in list_algorithms():
        store.store(group="algo", name=f"{name}_schema", node=get_algorithm(name).config_class)
