"""The allowed values of ``reasoning-rl-train``'s text settings, as ``config_checks.TRAIN_RANGES`` is for
its numbers: :data:`TRAIN_CHOICES` (settings with a fixed set of values, each from the module that uses
it) and :data:`TRAIN_TEXT` (every other text setting, with the rule that checks it or why any value is
fine). ``reasoning_rl.validation.validate`` checks them before anything runs (docs/errors.md)."""

from __future__ import annotations

from reasoning_rl.policy.loading import DTYPE_NAMES, TINY_ARCHS
from rewards.compose import NONE_POLICIES

TRAIN_CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": DTYPE_NAMES,
    "model.reference_dtype": DTYPE_NAMES,
    "model.tiny.arch": TINY_ARCHS,
    "task.none_policy": NONE_POLICIES,
    "warmstart.target": ("reference", "solution"),
    "trainer.tracking.wandb_mode": ("online", "offline", "disabled"),
}
"""The allowed values of each text setting with a fixed set of them (dotted name -> choices), checked by
:func:`validate` with the ranges; the other text settings are in :data:`TRAIN_TEXT`."""

TRAIN_TEXT: dict[str, str] = {
    # checked by validate() against a registry or a rule of their own
    "task.name": "a task definition's name (checked: reasoning_rl.tasks.definition)",
    "task.rewards.name": "a registered verifier's name (checked: rewards.list_verifiers)",
    "task.audit.verifier": "a registered verifier's name (checked: rewards.list_verifiers)",
    "task.env": "a registered environment's name (checked: reasoning_rl.envs.registry)",
    "task.episode.observation_role": "inline, user or tool (checked: EpisodeConfig.problems)",
    "model.runtime": "auto, hf or lean (checked: reasoning_rl.policy.runtime.SETTINGS)",
    "model.lm_head_chunk": "auto, 0 or a number of positions (checked: reasoning_rl.policy.lm_head.resolve_chunk)",
    "rollout.backend": "hf, native or vllm (checked in validate)",
    "rollout.inject.precision": "bf16, fp16 or null (checked: InjectConfig.problems)",
    "trainer.precision": "fp32, bf16 or fp16 (checked: reasoning_rl.policy.precision)",
    "algo.name": "a registered algorithm (checked: reasoning_rl.algo.registry)",
    "algo.lr_schedule": "checked: AlgoConfig.problems",
    "algo.correction.name": "checked: CorrectionConfig.problems",
    "algo.loss_aggregation": "checked: ClippedPolicyConfig.problems",
    "algo.advantage.estimator": "checked: AdvantageConfig.problems",
    "algo.advantage.std": "checked: AdvantageConfig.problems",
    "algo.kl.estimator": "checked: KLConfig.problems",
    "algo.kl.placement": "checked: KLConfig.problems",
    "algo.policy_loss.ratio_level": "checked: PolicyLossConfig.problems",
    "algo.policy_loss.name": "checked: PolicyLossConfig.problems",
    "algo.entropy_control.name": "checked: EntropyControlConfig.problems",
    "algo.critic": "checked: PPOConfig.problems",
    "algo.samples_from": "checked: RFTConfig.problems",
    "trainer.loggers": "registered trackers (checked: reasoning_rl.trackers.registry.logger_problems)",
    "trainer.health.stop_on": "health rule names (checked: HealthConfig.problems)",
    "trainer.health.disable": "health rule names (checked: HealthConfig.problems)",
    # free text: any value is meaningful, or it is a path or a name another library resolves
    "task.train_split": "a split name of the task's definition (null: its default)",
    "task.eval_split": "a split name of the task's definition (null: its default)",
    "task.data_dir": "a folder",
    "task.prompt_template": "any template text",
    "task.system_prompt": "any text",
    "task.rewards.label": "any label for the logs",
    "model.name_or_path": "a local folder or a hub name (an unreachable one is reported by the loader, one line)",
    "model.device": "a torch device string (cpu, cuda, cuda:1, auto)",
    "model.attn_implementation": "transformers' attention implementation names, which depend on its version",
    "model.gguf.package": "a package name",
    "model.gguf.file": "a file name",
    "model.gguf.install": "a folder",
    "model.gguf.cache_dir": "a folder",
    "model.lora.target_modules": "module names of the chosen model",
    "rollout.stop": "any stop strings",
    "rollout.vllm_dtype": "vLLM's dtype names (auto, half, float16, bfloat16, float32, ...)",
    "trainer.output_dir": "a folder",
    "warmstart.target_suffix": "any text",
    "evaluation.retention.task": "a task definition's name (checked: RetentionConfig.problems)",
    "evaluation.retention.split": "a split name of that definition",
    "evaluation.retention.data_file": "a file",
    "evaluation.retention.stop": "any stop strings",
    "algo.variant": "the preset's name, for logs and reports",
    "trainer.tracking.project": "the W&B project / MLflow experiment name",
    "trainer.tracking.run_name": "any run name for the trackers (null: the run folder's)",
    "trainer.tracking.mlflow_tracking_uri": "an MLflow URI (an http one that does not answer is refused: logger_problems)",
}
"""Text settings of ``reasoning-rl-train`` that :data:`TRAIN_CHOICES` does not list, each
with the rule that checks it or the reason any value is fine. A test walks every schema and fails on a
text field found in neither, so a new setting cannot go unchecked by accident."""
