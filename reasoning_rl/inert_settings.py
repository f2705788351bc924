"""No setting without effect: one table of the settings that do nothing in the composed configuration.

``task.audit.fraction=0.5`` without ``task.audit.verifier`` used to run no audit and say nothing. Each
row of :data:`INERT` names a setting, what must hold for it to act (a predicate on the whole config)
and what to do. A setting changed from its schema default while its condition does not hold is
*refused* (one line in the ``ConfigError``, exit code 2, before anything is written) or, where
refusing would break a documented command (turning the warm start or the evaluation off while a
group file tuned it), *warned* about in one log line. Settings left at their defaults are never
reported: a row only speaks when someone set the value. :func:`validate` in reasoning_rl.config
calls :func:`inert_problems`; docs/errors.md ("Settings without effect") lists the rows."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasoning_rl.config import TrainConfig

log = logging.getLogger(__name__)

_NOT_SET = object()


@dataclass(frozen=True)
class Inert:
    """A setting that acts only when ``acts`` holds."""

    setting: str
    """Dotted key (``algo.correction.c``); a row whose setting the config does not have (an algorithm
    without it) is skipped."""
    needs: str
    """What must hold, as a reader would write it (``algo.correction.name=tis``)."""
    acts: Callable[[TrainConfig], bool]
    """True when the setting has an effect in this configuration."""
    refuse: bool = True
    """False: warn in the log instead of refusing."""
    fix: str = ""
    """What to set for it to act; empty: ``set <needs>``."""

    def message(self, value: Any) -> str:
        return (f"{self.setting}={value!r} has no effect unless {self.needs}: "
                f"{self.fix or 'set ' + self.needs} or drop {self.setting}")


MIS = ("mis_token", "mis_seq", "mis_geo")

INERT: tuple[Inert, ...] = (
    *(Inert(f"task.audit.{k}", "task.audit.verifier is set", lambda c: c.task.audit.verifier is not None,
            fix="set task.audit.verifier (e.g. math, math_verify, code)") for k in ("fraction", "seed", "asynchronous", "options")),
    # An algorithm's group option: the row is read only where the chosen algorithm has the setting, so its
    # condition reads the group directly (reasoning_rl.config_renames lists the old flat names).
    Inert("algo.correction.c", "algo.correction.name=tis", lambda c: c.algo.correction.name == "tis"),
    *(Inert(f"algo.correction.{k}", "algo.correction.name is one of mis_token, mis_seq, mis_geo",
            lambda c: c.algo.correction.name in MIS, fix="set algo.correction.name=mis_token") for k in ("low", "high")),
    Inert("algo.correction.delta", "algo.correction.name=dppo_tv", lambda c: c.algo.correction.name == "dppo_tv"),
    Inert("algo.correction.kl_max", "algo.correction.name=trust_region_mask",
          lambda c: c.algo.correction.name == "trust_region_mask"),
    Inert("algo.entropy_control.fraction", "algo.entropy_control.name is clip_cov or kl_cov",
          lambda c: c.algo.entropy_control.name in ("clip_cov", "kl_cov"), fix="set algo.entropy_control.name=clip_cov"),
    *(Inert(f"algo.entropy_control.cov_{k}", "algo.entropy_control.name=clip_cov",
            lambda c: c.algo.entropy_control.name == "clip_cov") for k in ("low", "high")),
    Inert("algo.entropy_control.kl_coef", "algo.entropy_control.name=kl_cov",
          lambda c: c.algo.entropy_control.name == "kl_cov"),
    Inert("algo.entropy_control.top_fraction", "algo.entropy_control.name=high_entropy",
          lambda c: c.algo.entropy_control.name == "high_entropy"),
    Inert("algo.advantage.positive_weight", "algo.advantage.estimator=w_reinforce",
          lambda c: c.algo.advantage.estimator == "w_reinforce"),
    Inert("algo.advantage.pass_k", "algo.advantage.estimator=pass_at_k",
          lambda c: c.algo.advantage.estimator == "pass_at_k"),
    Inert("algo.dynamic_sampling.max_rounds", "algo.dynamic_sampling.enabled=true",
          lambda c: c.algo.dynamic_sampling.enabled),
    *(Inert(f"algo.kl.{k}", "algo.kl.beta > 0", lambda c: c.algo.kl.beta > 0,
            fix="set algo.kl.beta > 0 (0 loads no reference, adds no KL term)")
      for k in ("estimator", "placement", "clamp", "ref_reset_every")),
    *(Inert(f"evaluation.{k}", "evaluation.kl_to_base_every > 0", lambda c: c.evaluation.kl_to_base_every > 0)
      for k in ("kl_to_base_prompts", "kl_to_base_samples")),
    *(Inert(f"evaluation.retention.{k}", "evaluation.retention.task is set",
            lambda c: c.evaluation.retention.task is not None, fix="set evaluation.retention.task")
      for k in ("split", "num_examples", "samples_per_problem", "data_file", "max_new_tokens", "stop")),
    *(Inert(f"evaluation.{k}", "evaluation.enabled=true", lambda c: c.evaluation.enabled, refuse=False)
      for k in ("num_examples", "samples_per_problem", "every")),
    *(Inert(f"warmstart.{k}", "warmstart.enabled=true", lambda c: c.warmstart.enabled, refuse=False)
      for k in ("max_steps", "batch_size", "learning_rate", "stop_at_accuracy", "check_every", "probe_size",
                "target_suffix", "target", "mask_observations")),
    *(Inert(f"rollout.{k}", "rollout.backend=vllm", lambda c: c.rollout.backend == "vllm")
      for k in ("vllm_gpu_memory_utilization", "vllm_sleep_mode", "vllm_sleep_level", "vllm_sync_timeout",
                "vllm_dtype", "vllm_max_model_len", "vllm_enforce_eager", "vllm_check_logprobs")),
    *(Inert(f"trainer.health.{k}", "trainer.health.enabled=true", lambda c: c.trainer.health.enabled)
      for k in ("stop_on", "disable", "thresholds", "preflight")),
    *(Inert(f"trainer.tracking.{k}", "trainer.loggers has wandb or mlflow",
            lambda c: bool({"wandb", "mlflow"} & set(c.trainer.loggers)), fix="add wandb or mlflow to trainer.loggers")
      for k in ("project", "run_name")),
    Inert("trainer.tracking.mlflow_tracking_uri", "trainer.loggers has mlflow", lambda c: "mlflow" in c.trainer.loggers,
          fix="add mlflow to trainer.loggers"),
    Inert("trainer.tracking.wandb_mode", "trainer.loggers has wandb", lambda c: "wandb" in c.trainer.loggers,
          fix="add wandb to trainer.loggers"),
)
"""Every setting that acts only under a condition; a test walks the table (tests/reasoning_rl/test_inert_settings.py)."""


def value_and_default(cfg: Any, dotted: str) -> tuple[Any, Any]:
    """The setting's value in ``cfg`` and its schema default (the owning dataclass's field default);
    ``(_NOT_SET, _NOT_SET)`` when the config has no such setting."""
    *path, name = dotted.split(".")
    owner = cfg
    for part in path:
        owner = getattr(owner, part, _NOT_SET)
        if owner is _NOT_SET:
            return _NOT_SET, _NOT_SET
    fields = {f.name: f for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else {}
    if name not in fields:
        return _NOT_SET, _NOT_SET
    f = fields[name]
    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    return getattr(owner, name), default


def inert_settings(cfg: TrainConfig, table: tuple[Inert, ...] = INERT) -> list[tuple[Inert, Any]]:
    """The rows whose setting was changed from its default while it has no effect, with its value."""
    out = []
    for row in table:
        value, default = value_and_default(cfg, row.setting)
        if value is not _NOT_SET and value != default and not row.acts(cfg):
            out.append((row, value))
    return out


def inert_problems(cfg: TrainConfig) -> list[str]:
    """The refused settings' lines (for ``validate``'s ``ConfigError``); the warned ones are logged here."""
    out = []
    for row, value in inert_settings(cfg):
        if row.refuse:
            out.append(row.message(value))
        else:
            log.warning("%s (ignored)", row.message(value))
    return out
