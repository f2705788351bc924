"""``trainer``: run length, seeds, checkpoints, logging, trackers and the health rules."""

from __future__ import annotations

from dataclasses import dataclass, field

RULE_THRESHOLDS: dict[str, float] = {
    "non_finite": 0.0,
    "truncation": 0.5,
    "zero_variance": 0.95,
    "reward_constant": 1e-6,
    "unscorable": 0.5,
    "entropy_collapse": 0.1,
    "entropy_explosion": 5.0,
    "kl_runaway": 5.0,
    "mismatch_rising": 0.05,
    "clip_saturated": 0.5,
    "grad_spike": 20.0,
    "length_runaway": 4.0,
    "tamper": 0.0,
    "audit_disagreement": 0.1,
}
"""Each health rule's threshold as the run starts: ``trainer.health.thresholds`` records them all and
changes one (``trainer.health.thresholds.truncation=0.3``). The rules, in this order, with their tests and
windows: reasoning_rl.health.rules.RULES (docs/health.md)."""


@dataclass
class TrackingConfig:
    """``trainer.tracking``: where the trackers of ``trainer.loggers`` write (docs/trackers.md)."""

    project: str = "reasoning-rl"
    """W&B project and MLflow experiment name."""
    run_name: str | None = None
    """The tracker run's name (null = the run folder's name)."""
    mlflow_tracking_uri: str | None = None
    """MLflow server (``http://127.0.0.1:5000``) or store; null = $MLFLOW_TRACKING_URI, else ./mlruns.
    An http(s) URI that does not answer stops the run before its first step."""
    wandb_mode: str | None = None
    """online, offline or disabled; null = $WANDB_MODE, else online."""


@dataclass
class HealthConfig:
    """The health rules (reasoning_rl.health, docs/health.md) read every step's metrics."""

    enabled: bool = True
    """Check the rules every step (health.jsonl, the log, status.json's ``health``)."""
    preflight: bool = True
    """Before step 1, sample and score step 1's batch and warn about truncation, zero-variance groups,
    unscorable answers and prompts too long for the context (reasoning_rl.health.preflight)."""
    stop_on: list[str] = field(default_factory=lambda: ["non_finite"])
    """Rules whose firing stops the run: status ``failed`` with cause ``health:<rule>``, exit code 2."""
    disable: list[str] = field(default_factory=list)
    """Rules not checked."""
    thresholds: dict[str, float] = field(default_factory=lambda: dict(RULE_THRESHOLDS))
    """Rule name -> threshold: every rule's, from RULE_THRESHOLDS above (so the
    resolved config records them); ``trainer.health.thresholds.truncation=0.3`` changes one."""

    def problems(self, prefix: str = "trainer.health") -> list[str]:
        out = []
        for key, names in (("stop_on", self.stop_on), ("disable", self.disable), ("thresholds", self.thresholds)):
            unknown = [n for n in names if n not in RULE_THRESHOLDS]
            if unknown:
                out.append(f"{prefix}.{key} names unknown rules {unknown}; the rules are {', '.join(RULE_THRESHOLDS)}")
        both = sorted(set(self.stop_on) & set(self.disable))
        if both:
            out.append(f"{prefix}.stop_on and {prefix}.disable both name {both}: a disabled rule cannot stop the run")
        return out


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
    checkpointing, about half the peak); null (auto) returns them only for a CPU policy of 50M+ parameters
    trained with gradient checkpointing and keeps them otherwise (SmolLM2-135M's GRPO step without
    checkpointing: 0.77M page faults a step instead of 3.71M, peak RSS 6.55 instead of 6.15 GB, docs/real_model.md).
    Process-wide; results are unchanged; no effect off glibc."""
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
