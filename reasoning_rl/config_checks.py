"""Checks every config schema shares: unknown keys and the allowed range of each numeric setting.

Two tables keyed by dotted name say what a number may be: :data:`TRAIN_RANGES` (every group of
``reasoning-rl-train``, the settings of every registered algorithm under ``algo.``) and
:data:`TRAIN_FREE` (numbers any value of is fine, each with the reason). ``benchmarks.config``
has the same two tables for ``reasoning-rl-eval``. A test walks every schema and fails on a
numeric field found in neither table, so a new setting cannot go unchecked by accident.

:func:`range_problems` walks a config object and returns one line per bad value;
:func:`unknown_keys` compares a composed config with its schema and returns one line per key
no schema knows, with the closest known key ("did you mean ``algo.group_size``?"): Hydra's
``+key=value`` adds any key, and OmegaConf keeps unknown keys as plain attributes, so
without this a typo written with ``+`` would be recorded and silently ignored. Fields typed
``dict`` (or ``Any``) are free-form by design and their contents are not checked
(:func:`free_form_fields`; docs/errors.md lists them).

Only the standard library and OmegaConf's exception types are imported here, so that both
applications can use it without loading models or algorithms.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reasoning_rl.config_renames import renamed_key_message
from reasoning_rl.errors import UserError


class ConfigError(UserError, ValueError):
    """Settings that cannot run, each named by its key."""


@dataclass(frozen=True)
class Range:
    """The allowed values of one numeric setting: ``low <= x`` (``low < x`` when ``low_open``)
    and ``x <= high`` (``x < high`` when ``high_open``); ``None`` bounds are open-ended. ``null``
    is allowed whenever the field is Optional (its docstring says what null means)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def allows(self, x: float) -> bool:
        if isinstance(x, float) and math.isnan(x):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return not (self.high is not None and (x >= self.high if self.high_open else x > self.high))

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return "a number"


AT_LEAST_0 = Range(low=0)
AT_LEAST_1 = Range(low=1)
POSITIVE = Range(low=0, low_open=True)
FRACTION = Range(0, 1)
"""[0, 1]."""
SHARE = Range(0, 1, low_open=True)
"""(0, 1]: a share that must not be 0 (top_p, a memory share)."""
BELOW_1 = Range(0, 1, high_open=True)
"""[0, 1): an Adam beta, a clip range below 1."""

TRAIN_RANGES: dict[str, Range] = {
    # task
    "task.max_train_examples": AT_LEAST_1,
    "task.max_eval_examples": AT_LEAST_1,
    "task.audit.fraction": FRACTION,
    "task.episode.max_turns": AT_LEAST_1,
    "task.episode.max_tokens": AT_LEAST_1,
    "task.episode.retry_groups": FRACTION,
    # model (the tiny model's shape)
    "model.tiny.hidden_size": AT_LEAST_1,
    "model.tiny.num_layers": AT_LEAST_1,
    "model.tiny.num_heads": AT_LEAST_1,
    "model.tiny.intermediate_size": AT_LEAST_1,
    "model.tiny.max_position_embeddings": AT_LEAST_1,
    "model.lora.r": AT_LEAST_0,
    "model.lora.alpha": POSITIVE,
    "model.lora.dropout": BELOW_1,
    # rollout
    "rollout.temperature": POSITIVE,
    "rollout.top_p": SHARE,
    "rollout.top_k": AT_LEAST_0,
    "rollout.max_new_tokens": AT_LEAST_1,
    "rollout.batch_size": AT_LEAST_1,
    "rollout.reward_timeout": POSITIVE,
    "rollout.reward_workers": AT_LEAST_0,
    "rollout.vllm_gpu_memory_utilization": SHARE,
    "rollout.vllm_sleep_level": Range(1, 2),
    "rollout.vllm_sync_timeout": POSITIVE,
    "rollout.vllm_max_model_len": AT_LEAST_1,
    "rollout.max_staleness": AT_LEAST_0,
    "rollout.inject.stale": AT_LEAST_0,
    "rollout.inject.noise": AT_LEAST_0,
    "rollout.inject.temperature_skew": POSITIVE,
    # trainer
    "trainer.steps": AT_LEAST_0,
    "trainer.save_every": AT_LEAST_0,
    "trainer.keep_checkpoints": AT_LEAST_1,
    "trainer.num_threads": AT_LEAST_1,
    "trainer.max_failed_reward_share": FRACTION,
    "trainer.failed_reward_window": AT_LEAST_1,
    # warmstart
    "warmstart.max_steps": AT_LEAST_0,
    "warmstart.batch_size": AT_LEAST_1,
    "warmstart.learning_rate": AT_LEAST_0,
    "warmstart.stop_at_accuracy": FRACTION,
    "warmstart.check_every": AT_LEAST_1,
    "warmstart.probe_size": AT_LEAST_1,
    # evaluation
    "evaluation.num_examples": AT_LEAST_1,
    "evaluation.samples_per_problem": AT_LEAST_1,
    "evaluation.every": AT_LEAST_0,
    "evaluation.kl_to_base_every": AT_LEAST_0,
    "evaluation.kl_to_base_prompts": AT_LEAST_1,
    "evaluation.kl_to_base_samples": AT_LEAST_1,
    "evaluation.retention.num_examples": AT_LEAST_1,
    "evaluation.retention.samples_per_problem": AT_LEAST_1,
    "evaluation.retention.max_new_tokens": AT_LEAST_1,
    # algo: every registered algorithm's settings (their own problems() add enum and cross-field checks)
    "algo.prompts_per_step": AT_LEAST_1,
    "algo.micro_batch_size": AT_LEAST_1,
    "algo.learning_rate": AT_LEAST_0,
    "algo.weight_decay": AT_LEAST_0,
    "algo.adam_beta1": BELOW_1,
    "algo.adam_beta2": BELOW_1,
    "algo.max_grad_norm": AT_LEAST_0,
    "algo.lr_warmup_steps": AT_LEAST_0,
    "algo.policy_loss.eps_low": BELOW_1,
    "algo.policy_loss.eps_high": AT_LEAST_0,
    "algo.num_iterations": AT_LEAST_1,
    "algo.group_size": AT_LEAST_1,
    "algo.kl.beta": AT_LEAST_0,
    "algo.advantage.eps": AT_LEAST_0,
    "algo.kl.ref_reset_every": AT_LEAST_0,
    "algo.dynamic_sampling.max_rounds": AT_LEAST_0,
    "algo.advantage.positive_weight": AT_LEAST_0,
    "algo.advantage.pass_k": AT_LEAST_1,
    "algo.policy_loss.dual_clip_c": AT_LEAST_0,
    "algo.policy_loss.log_ratio_clamp": AT_LEAST_0,
    "algo.kl.clamp": AT_LEAST_0,
    "algo.entropy_control.fraction": FRACTION,
    "algo.entropy_control.kl_coef": AT_LEAST_0,
    "algo.entropy_control.top_fraction": SHARE,
    "algo.gamma": FRACTION,
    "algo.lam": FRACTION,
    "algo.value_clip": POSITIVE,
    "algo.vf_coef": AT_LEAST_0,
    "algo.critic_learning_rate": AT_LEAST_0,
    "algo.pairs_per_prompt": AT_LEAST_0,
    "algo.beta": AT_LEAST_0,  # DPO's beta (its problems() asks > 0); GRPO's and PPO's is algo.kl.beta
}
"""Allowed range of every numeric setting of ``reasoning-rl-train`` (dotted name -> range)."""

TRAIN_FREE: dict[str, str] = {
    "trainer.seed": "any integer seeds the random generators",
    "task.audit.seed": "any integer seeds the verifier audit's sample",
    "model.tiny.init_seed": "any integer seeds the tiny model's initialisation",
    "task.rewards.weight": "a reward component's weight may be negative (a penalty) or 0 (measured, not rewarded)",
    "algo.entropy_control.cov_low": "a bound on a covariance, which may be negative (EntropyControlConfig.problems checks low <= high)",
    "algo.entropy_control.cov_high": "a bound on a covariance, which may be negative (EntropyControlConfig.problems checks low <= high)",
}
"""Numeric settings of ``reasoning-rl-train`` any value of is valid, with the reason."""


def _unwrap(annotation: Any) -> Any:
    """``int | None`` -> ``int``; other annotations unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_number_type(annotation: Any) -> bool:
    return annotation in (int, float)


def _list_item(annotation: Any) -> Any | None:
    """The item type of ``list[T]``; None for anything else."""
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (Any,)
        return _unwrap(item)
    return None


def _hints(schema: type) -> dict[str, Any]:
    return {name: _unwrap(t) for name, t in typing.get_type_hints(schema).items()}


def numeric_fields(schema: type, prefix: str = "") -> Iterator[str]:
    """Dotted names of every numeric field of ``schema`` (``int``, ``float``, Optional of them, lists
    of them), walking nested dataclasses and lists of dataclasses (``task.rewards.weight``)."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        t, item = hints[f.name], _list_item(hints[f.name])
        if _is_number_type(t) or (item is not None and _is_number_type(item)):
            yield prefix + f.name
        elif dataclasses.is_dataclass(t):
            yield from numeric_fields(t, f"{prefix}{f.name}.")
        elif item is not None and dataclasses.is_dataclass(item):
            yield from numeric_fields(item, f"{prefix}{f.name}.")


def declared_ranges(schema: type, prefix: str = "") -> dict[str, Range]:
    """The ranges a schema's fields declare themselves (``field(metadata={"range": POSITIVE})``), by dotted
    name, walking nested dataclasses: a group whose options come and go with its variants (the off-policy
    corrections') keeps each option's range beside the option instead of in :data:`TRAIN_RANGES`."""
    hints = _hints(schema)
    out = {}
    for f in dataclasses.fields(schema):
        if "range" in f.metadata:
            out[prefix + f.name] = f.metadata["range"]
        elif dataclasses.is_dataclass(hints[f.name]):
            out |= declared_ranges(hints[f.name], f"{prefix}{f.name}.")
    return out


def free_form_fields(schema: type, prefix: str = "") -> Iterator[str]:
    """Dotted names of the fields whose contents no schema checks: ``dict`` or ``Any`` typed."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        t, item = hints[f.name], _list_item(hints[f.name])
        if t is Any or t is dict or typing.get_origin(t) is dict:
            yield prefix + f.name
        elif dataclasses.is_dataclass(t):
            yield from free_form_fields(t, f"{prefix}{f.name}.")
        elif item is not None and dataclasses.is_dataclass(item):
            yield from free_form_fields(item, f"{prefix}{f.name}.")


def config_values(cfg: Any, prefix: str = "", label: str = "") -> Iterator[tuple[str, str, Any]]:
    """``(key, shown, value)`` for every value of the dataclass object ``cfg`` that is not itself a dataclass,
    walking nested dataclasses and lists: ``key`` is the dotted name the range and choice tables use, ``shown``
    the one a message prints (they differ inside lists: ``task.rewards.weight`` is shown as
    ``task.rewards[1].weight``, a plain list's items as ``algo.x[0]``)."""
    label = label or prefix
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key, shown = prefix + f.name, label + f.name
        if dataclasses.is_dataclass(value):
            yield from config_values(value, key + ".", shown + ".")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from config_values(item, key + ".", f"{shown}[{i}].")
                else:
                    yield key, f"{shown}[{i}]", item
        else:
            yield key, shown, value


def range_problems(cfg: Any, ranges: Mapping[str, Range]) -> list[str]:
    """One line per numeric value of the dataclass object ``cfg`` outside its range in ``ranges``
    (``trainer.save_every must be >= 0, got -5``)."""
    return [f"{shown} must be {ranges[key]}, got {value}" for key, shown, value in config_values(cfg)
            if _is_number(value) and key in ranges and not ranges[key].allows(value)]


def choice_problems(cfg: Any, choices: Mapping[str, tuple[str, ...]]) -> list[str]:
    """One line per text value of the dataclass object ``cfg`` that is not one of its choices in
    ``choices`` (``model.dtype='float8' is unknown; choose one of float32, ...``), with the closest
    choice when there is one; None (an Optional field left null) is always allowed."""
    return [unknown_choice(shown, value, choices[key]) for key, shown, value in config_values(cfg)
            if value is not None and key in choices and value not in choices[key]]


def unknown_choice(key: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    """``model.dtype='float8' is unknown (did you mean float16?); choose one of float32, ...``."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{key}={value!r} is unknown{hint}; choose one of {', '.join(str(c) for c in choices)}"


def text_fields(schema: type, prefix: str = "") -> Iterator[str]:
    """Dotted names of every text field of ``schema`` (``str``, Optional, lists of it), walking nested
    dataclasses and lists of dataclasses, as :func:`numeric_fields` does for numbers."""
    hints = _hints(schema)
    for f in dataclasses.fields(schema):
        t, item = hints[f.name], _list_item(hints[f.name])
        if t is str or item is str:
            yield prefix + f.name
        elif dataclasses.is_dataclass(t):
            yield from text_fields(t, f"{prefix}{f.name}.")
        elif item is not None and dataclasses.is_dataclass(item):
            yield from text_fields(item, f"{prefix}{f.name}.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mentions(problem: str, keys: list[str]) -> bool:
    """Whether ``problem`` names one of the dotted ``keys`` (whole names only: ``algo.beta`` is not
    in ``algo.adam_beta1``)."""
    return any(re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", problem) for k in keys)


def unknown_keys(values: Mapping[str, Any], schema: type, prefix: str = "",
                 schemas: Mapping[str, type] | None = None) -> list[str]:
    """One line per key of the plain mapping ``values`` (a composed config) that ``schema`` has no
    field for, with the closest field name. ``schemas`` replaces the declared type of a dotted
    field (``{"algo": GRPOConfig}``: the chosen algorithm's class instead of the base). The contents
    of ``dict``/``Any`` fields are free-form and not looked at."""
    schemas = schemas or {}
    hints = _hints(schema)
    names = [f.name for f in dataclasses.fields(schema)]
    out = []
    for key, value in values.items():
        dotted = prefix + str(key)
        if key not in names:
            out.append(unknown_key_message(dotted, names, prefix))
            continue
        t = schemas.get(dotted, hints[key])
        item = _list_item(t)
        if dataclasses.is_dataclass(t) and not isinstance(value, Mapping) and (renamed := renamed_key_message(dotted)):
            out.append(renamed)  # an old flat key that is now this group's name (algo.correction=tis)
        elif dataclasses.is_dataclass(t) and isinstance(value, Mapping):
            out += unknown_keys(value, t, dotted + ".", schemas)
        elif item is not None and dataclasses.is_dataclass(item) and isinstance(value, list):
            for i, element in enumerate(value):
                if isinstance(element, Mapping):
                    out += unknown_keys(element, item, f"{dotted}[{i}].", schemas)
    return out


def unknown_key_message(dotted: str, known: list[str], prefix: str = "") -> str:
    """``unknown key algo.grop_size (did you mean algo.group_size?)``, or the known keys when none is close."""
    renamed = renamed_key_message(dotted)
    if renamed is not None:
        return renamed
    name = dotted[len(prefix):]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key {dotted} (did you mean {prefix}{close[0]}?)"
    where = prefix.rstrip(".") or "the config"
    return f"unknown key {dotted} ({where} has: {', '.join(sorted(known))})"


def problems_message(problems: list[str], what: str = "invalid configuration") -> str:
    """One line for one problem, a short list for several."""
    if len(problems) == 1:
        return f"{what}: {problems[0]}"
    return f"{what}:\n  - " + "\n  - ".join(problems)


def unknown_keys_error(problems: list[str]) -> ConfigError:
    """The error for the lines of :func:`unknown_keys`: one line for one key, a short list for several."""
    return ConfigError(problems[0] if len(problems) == 1 else problems_message(problems, "unknown configuration keys"))
