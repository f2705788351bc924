"""Checking a composed configuration (:class:`reasoning_rl.config.TrainConfig`) before anything runs:
:func:`validate` names every bad setting in one :class:`ConfigError` (ranges, choices, registry names,
the algorithm's own checks, the compatibility table's refusals, settings without effect);
:func:`key_problems` refuses unknown keys with the closest known one. The schema itself
(reasoning_rl.config) imports none of the feature modules these checks ask."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rewards
from reasoning_rl import compat
from reasoning_rl.algo.registry import get_algorithm
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import (
    TRAIN_RANGES,
    ConfigError,
    choice_problems,
    declared_ranges,
    mentions,
    problems_message,
    range_problems,
    unknown_choice,
    unknown_keys,
)
from reasoning_rl.config_choices import TRAIN_CHOICES
from reasoning_rl.envs.registry import list_environments
from reasoning_rl.errors import UserError
from reasoning_rl.evaluation.retention import retention_problems
from reasoning_rl.inert_settings import inert_problems
from reasoning_rl.policy.lm_head import resolve_chunk
from reasoning_rl.policy.lora import lora_problems
from reasoning_rl.policy.precision import precision_problems
from reasoning_rl.policy.runtime import SETTINGS as RUNTIME_SETTINGS
from reasoning_rl.settings.evaluation import WarmStartConfig
from reasoning_rl.settings.model import TINY
from reasoning_rl.tasks.definition import get_definition
from reasoning_rl.tasks.task import reward_specs
from reasoning_rl.trackers.registry import logger_problems


def key_problems(values: Mapping[str, Any]) -> list[str]:
    """Keys of a composed config (a plain dict) that no schema knows, each with the closest known
    key: ``+algo.grop_size=4`` -> ``unknown key algo.grop_size (did you mean algo.group_size?)``.
    ``algo`` is checked against the chosen algorithm's dataclass (``algo.name`` via the registry); a key
    renamed when the algo settings were grouped names its new key (reasoning_rl.config_renames)."""
    algo = values.get("algo")
    name = algo.get("name", "grpo") if isinstance(algo, Mapping) else "grpo"
    return unknown_keys(values, TrainConfig, schemas={"algo": get_algorithm(str(name)).config_class})


def mask_observations_problem(warmstart: WarmStartConfig, env: str | None) -> str | None:
    """Why ``warmstart.mask_observations`` cannot run with ``task.env`` = ``env``; None when it can."""
    if warmstart.mask_observations and env is None:
        return ("warmstart.mask_observations=true masks the observations of task.env, which is null: "
                "set task.env (e.g. task=multiply_tool) or drop warmstart.mask_observations")
    return None


def validate(cfg: TrainConfig) -> None:
    """Reject settings that would fail later or silently do something else, naming every bad key
    in one :class:`ConfigError`: each numeric setting's range (``config_checks.TRAIN_RANGES``
    and those the algorithm's fields declare, ``config_checks.declared_ranges``),
    the algorithm's own checks (``problems()``) and the combinations that cannot run (every one a rule of
    ``reasoning_rl.compat``; the number of processes is checked by the run loop, :func:`compat.refuse`)."""
    entry = get_algorithm(cfg.algo.name)
    if not isinstance(cfg.algo, entry.config_class):
        raise ConfigError(f"algo.name={cfg.algo.name!r} needs its settings as {entry.config_class.__name__}, got "
                         f"{type(cfg.algo).__name__}; compose it with algo={cfg.algo.name} or build it with "
                         f"{entry.config_class.__module__}.{entry.config_class.__name__}")
    ranges = {**TRAIN_RANGES, **declared_ranges(type(cfg.algo), "algo.")}
    problems = range_problems(cfg, ranges) + choice_problems(cfg, TRAIN_CHOICES) + name_problems(cfg)
    if cfg.model.runtime not in RUNTIME_SETTINGS:
        problems.append(f"model.runtime={cfg.model.runtime!r} is unknown; choose one of {', '.join(RUNTIME_SETTINGS)}")
    # The algorithm's checks, less those about a key already reported out of range.
    reported = [p.split(" ", 1)[0] for p in problems]
    problems += [p for p in cfg.algo.problems() if not mentions(p, reported)]
    try:  # a definition file is small: an unknown task is refused before the run folder is touched
        get_definition(cfg.task.name, kind="task")
    except UserError as exc:
        problems.append(f"task.name: {exc}")
    if cfg.rollout.backend not in ("hf", "native", "vllm"):
        problems.append(f"rollout.backend={cfg.rollout.backend!r} is unknown; choose hf, native or vllm")
    problems += cfg.task.episode.problems("task.episode")
    if cfg.task.env is not None and cfg.task.episode.observation_role != "inline" and not cfg.task.use_chat_template:
        problems.append(f"task.episode.observation_role={cfg.task.episode.observation_role} makes each observation "
                        "a chat turn, which needs the prompt as a chat too: set task.use_chat_template=true")
    tiny = cfg.model.tiny
    if cfg.model.name_or_path == TINY and tiny.num_heads >= 1 and tiny.hidden_size % tiny.num_heads:
        problems.append(f"model.tiny.hidden_size={tiny.hidden_size} must be a multiple of "
                        f"model.tiny.num_heads={tiny.num_heads}")
    # fsdp=False: rollout.inject with trainer.fsdp is a rule of reasoning_rl.compat (stated once, there).
    problems += cfg.rollout.inject.problems(cfg.rollout.backend)
    problems += compat.problems(cfg)
    problems += retention_problems(cfg.evaluation.retention, cfg.evaluation.enabled, cfg.task.data_dir)
    problems += cfg.trainer.health.problems() + inert_problems(cfg)
    problems += logger_problems(cfg.trainer.loggers, cfg.trainer.tracking)
    problems += precision_problems(cfg.trainer.precision) + lora_problems(cfg)
    if cfg.warmstart.enabled and (problem := mask_observations_problem(cfg.warmstart, cfg.task.env)):
        problems.append(problem)
    if problems:
        raise ConfigError(problems_message(problems))


def name_problems(cfg: TrainConfig) -> list[str]:
    """Names looked up in a registry where they are used (the reward's and the audit's verifiers, the
    environment) and ``model.lm_head_chunk``, checked here with the other settings instead."""
    out = []
    verifiers = rewards.list_verifiers()
    named = [(f"task.rewards[{i}].name", s.name) for i, s in enumerate(reward_specs(cfg.task.rewards))]
    named += [("task.audit.verifier", cfg.task.audit.verifier)] if cfg.task.audit.verifier is not None else []
    out += [unknown_choice(key, name, verifiers) for key, name in named if name not in verifiers]
    if cfg.task.env is not None and cfg.task.env not in (envs := list_environments()):
        out.append(unknown_choice("task.env", cfg.task.env, envs))
    try:
        resolve_chunk(cfg.model.lm_head_chunk, 0)
    except UserError as exc:
        out.append(str(exc))
    return out
