"""Config checks: every numeric setting has a range (or a reason to have none), unknown keys are
refused with the closest known key, every bad value is named in one message."""

import errno
import math
from pathlib import Path

import pytest

from benchmarks.config import EVAL_FREE, EVAL_RANGES, EvalConfig
from benchmarks.config import validate as validate_eval
from reasoning_rl.algo.grpo_config import GRPOConfig
from reasoning_rl.algo.registry import get_algorithm, list_algorithms
from reasoning_rl.cli import to_train_config
from reasoning_rl.config import TrainConfig
from reasoning_rl.config_checks import (
    TRAIN_FREE,
    TRAIN_RANGES,
    ConfigError,
    Range,
    declared_ranges,
    free_form_fields,
    mentions,
    numeric_fields,
    text_fields,
)
from reasoning_rl.config_choices import TRAIN_CHOICES, TRAIN_TEXT
from reasoning_rl.entry_points import as_user_error, hydra_message, user_errors_exit
from reasoning_rl.errors import StorageError, UserError
from reasoning_rl.validation import key_problems, validate
from tests.reasoning_rl.conftest import compose_train

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def _train_numeric_fields() -> set[str]:
    """Every numeric setting of reasoning-rl-train: the groups, and every algorithm the project ships
    (an algorithm another test module registers, e.g. test_registry's example, is not the project's)."""
    names = {n for n in numeric_fields(TrainConfig) if not n.startswith("algo.")}
    for name in list_algorithms():
        schema = get_algorithm(name).config_class
        if schema.__module__.startswith("reasoning_rl."):
            names |= set(numeric_fields(schema, "algo.")) - set(declared_ranges(schema, "algo."))
    return names


def test_every_numeric_setting_has_a_range_or_a_reason():
    train = _train_numeric_fields()
    assert sorted(train - set(TRAIN_RANGES) - set(TRAIN_FREE)) == []
    assert sorted(set(numeric_fields(EvalConfig)) - set(EVAL_RANGES) - set(EVAL_FREE)) == []
    # No stale entries: each names a real setting, and none is both checked and free.
    assert sorted((set(TRAIN_RANGES) | set(TRAIN_FREE)) - train) == []
    assert sorted((set(EVAL_RANGES) | set(EVAL_FREE)) - set(numeric_fields(EvalConfig))) == []
    assert not set(TRAIN_RANGES) & set(TRAIN_FREE) and not set(EVAL_RANGES) & set(EVAL_FREE)
    assert {"trainer.save_every", "trainer.keep_checkpoints", "algo.group_size", "algo.gamma", "model.tiny.num_heads",
            "algo.pairs_per_prompt"} <= set(TRAIN_RANGES)


def test_every_text_setting_has_its_choices_or_a_rule():
    train = {n for n in text_fields(TrainConfig) if not n.startswith("algo.")}
    for name in list_algorithms():
        schema = get_algorithm(name).config_class
        if schema.__module__.startswith("reasoning_rl."):
            train |= set(text_fields(schema, "algo."))
    assert sorted(train - set(TRAIN_CHOICES) - set(TRAIN_TEXT)) == []
    assert sorted((set(TRAIN_CHOICES) | set(TRAIN_TEXT)) - train) == []  # no stale entries
    assert not set(TRAIN_CHOICES) & set(TRAIN_TEXT)
    assert {"model.dtype", "model.tiny.arch", "task.none_policy"} <= set(TRAIN_CHOICES)


@pytest.mark.parametrize(("key", "value", "message"), [
    # Each used to pass validation and fail deep in the run: exit code 1 and a 50-68 line traceback.
    ("model.dtype", "float8", "model.dtype='float8' is unknown (did you mean float32?); choose one of float32, fp32, "
                              "bfloat16, bf16, float16, fp16"),
    ("model.reference_dtype", "half", "model.reference_dtype='half' is unknown; choose one of float32, "),
    ("model.tiny.arch", "gpt2", "model.tiny.arch='gpt2' is unknown; choose one of llama, qwen2"),
    ("task.none_policy", "nonsense", "task.none_policy='nonsense' is unknown; choose one of propagate, skip, zero"),
    ("warmstart.target", "solutions", "warmstart.target='solutions' is unknown (did you mean solution?); choose one "
                                      "of reference, solution"),
    ("task.env", "pyton_tool", "task.env='pyton_tool' is unknown (did you mean python_tool?); choose one of "),
    ("task.audit.verifier", "math_verif", "task.audit.verifier='math_verif' is unknown (did you mean math_verify?)"),
    ("model.lm_head_chunk", "big", "model.lm_head_chunk='big' is not auto, 0 or a number of positions"),
])
def test_text_settings_are_checked_with_the_others(key, value, message):
    cfg = TrainConfig(algo=GRPOConfig())
    group, *inner, name = key.split(".")
    target = getattr(cfg, group)
    for part in inner:
        target = getattr(target, part)
    setattr(target, name, value)
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value).startswith(f"invalid configuration: {message}"), str(info.value)


def test_a_reward_component_with_an_unknown_verifier_is_named_by_its_position():
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.task.rewards = [{"name": "math"}, {"name": "fromat", "weight": 0.1}]
    with pytest.raises(ConfigError, match=r"task\.rewards\[1\]\.name='fromat' is unknown \(did you mean format\?\)"):
        validate(cfg)


@pytest.mark.parametrize(("rng", "inside", "outside", "text"), [
    (Range(low=0), [0, 0.0, 7], [-1, -1e-9, math.nan], ">= 0"),
    (Range(low=0, low_open=True), [1e-9, 300], [0, -2], "> 0"),
    (Range(0, 1, high_open=True), [0, 0.999], [1, 1.5, -0.1], "in [0, 1)"),
    (Range(0, 1, low_open=True), [1, 0.5], [0, 1.01], "in (0, 1]"),
    (Range(1, 2), [1, 2], [0, 3], "in [1, 2]"),
])
def test_range_bounds(rng, inside, outside, text):
    assert all(rng.allows(x) for x in inside)
    assert not any(rng.allows(x) for x in outside)
    assert str(rng) == text


def test_every_bad_setting_is_named_in_one_message():
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.trainer.save_every, cfg.trainer.keep_checkpoints, cfg.rollout.top_p = -5, -1, 0.0
    cfg.warmstart.stop_at_accuracy = 1.5
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value).splitlines() == [
        "invalid configuration:",
        "  - rollout.top_p must be in (0, 1], got 0.0",
        "  - trainer.save_every must be >= 0, got -5",
        "  - trainer.keep_checkpoints must be >= 1, got -1",
        "  - warmstart.stop_at_accuracy must be in [0, 1], got 1.5",
    ]


def test_one_bad_setting_is_one_line_and_the_algorithm_check_is_not_repeated():
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.algo.group_size = 0  # out of the table's range, and GRPO's own check (>= 2) would say it again
    with pytest.raises(ConfigError) as info:
        validate(cfg)
    assert str(info.value) == "invalid configuration: algo.group_size must be >= 1, got 0"
    cfg.algo.group_size = 1  # in range; GRPO's own check still refuses it
    with pytest.raises(ConfigError, match=r"algo.group_size must be >= 2 \(group statistics need 2 samples\)"):
        validate(cfg)


def test_mentions_matches_whole_keys_only():
    assert mentions("need 0 <= algo.policy_loss.eps_low < 1, got -1", ["algo.policy_loss.eps_low"])
    assert not mentions("algo.adam_beta1 must be in [0, 1)", ["algo.kl.beta"])
    assert not mentions("algo.beta_x is wrong", ["algo.kl.beta"])


def test_tiny_model_heads_must_divide_its_width():
    cfg = TrainConfig(algo=GRPOConfig())
    cfg.model.tiny.hidden_size, cfg.model.tiny.num_heads = 30, 4
    with pytest.raises(ConfigError, match=r"model\.tiny\.hidden_size=30 must be a multiple of model\.tiny\.num_heads=4"):
        validate(cfg)


def test_unknown_keys_name_the_closest_known_one_and_free_form_groups_are_left_alone():
    values = {
        "algo": {"name": "ppo", "lamda": 0.9},  # checked against PPOConfig, the chosen algorithm's class
        "trainer": {"steps": 3, "foo": 1},
        "task": {"source_kwargs": {"max_operand": 9}, "data_files": {"train": "x.jsonl"},
                 "rewards": [{"name": "math", "wieght": 1.0, "options": {"anything": 1}}]},
    }
    problems = key_problems(values)
    assert problems[0] == "unknown key algo.lamda (did you mean algo.lam?)"
    assert problems[1].startswith("unknown key trainer.foo (trainer has: failed_reward_window, fsdp, health, keep_checkpoints, ")
    assert problems[2] == "unknown key task.rewards[0].wieght (did you mean task.rewards[0].weight?)"
    assert len(problems) == 3


@pytest.mark.parametrize(("override", "message"), [
    ("+algo.grop_size=4", "unknown key algo.grop_size (did you mean algo.group_size?)"),
    ("+trainer.foo=1", "unknown key trainer.foo (trainer has: "),
    ("+evaluation.samples_per_prompt=2", "unknown key evaluation.samples_per_prompt "
                                         "(did you mean evaluation.samples_per_problem?)"),
])
def test_a_typo_added_with_plus_is_refused(override, message):
    cfg = compose_train([override])  # Hydra accepts it: `+` adds any key
    with pytest.raises(ConfigError) as info:
        to_train_config(cfg)
    assert str(info.value).startswith(message)


def test_free_form_keys_added_with_plus_are_accepted():
    cfg = to_train_config(compose_train(["+task.source_kwargs.max_operand=9", "+task.data_files.train=/tmp/x.jsonl"]))
    assert cfg.task.source_kwargs == {"max_operand": 9} and cfg.task.data_files == {"train": "/tmp/x.jsonl"}


def test_the_free_form_fields_are_the_documented_ones():
    free = set(free_form_fields(TrainConfig)) | set(free_form_fields(EvalConfig))
    assert free == {"task.data_files", "task.source_kwargs", "task.rewards.options", "task.audit.options", "benchmark",
                    "verifier_options", "task.episode.options", "episode.options", "trainer.health.thresholds"}
    text = DOCS.read_text()
    assert all(f"`{name}`" in text for name in free), "docs/errors.md must list every free-form field"


@pytest.mark.parametrize(("changes", "message"), [
    ({"n": 1, "k": [1, 4]}, "k=[4] needs at least k samples per problem, but n=1: raise n to 4 or drop those k"),
    ({"k": [0]}, "k[0] must be >= 1, got 0"),
    ({"model_name_or_path": None}, "say what to evaluate with exactly one of model="),
    ({"samples": "/no/such/file.jsonl"}, "exactly one of"),
    ({"temperature": -0.5, "limit": 0}, "limit must be >= 1, got 0\n  - temperature must be >= 0, got -0.5"),
    ({"benchmark": "gsm8k,math500", "data_files": "x.jsonl"}, "data_files= names one file"),
    ({"backend": "vlm"}, "backend='vlm' is unknown; choose one of auto, hf, native, vllm"),
    ({"backend": "hf", "tensor_parallel_size": 2}, "tensor_parallel_size=2 shards the model over GPUs with vLLM"),
])
def test_eval_settings_are_checked_before_anything_runs(changes, message):
    cfg = EvalConfig(benchmark="gsm8k", model_name_or_path="tiny")
    for key, value in changes.items():
        setattr(cfg, key, value)
    with pytest.raises(ConfigError) as info:
        validate_eval(cfg)
    assert message in str(info.value)


def test_hydra_group_errors_list_the_choices_without_schemas():
    from hydra.errors import MissingConfigException

    exc = MissingConfigException("...", "algo/grop", ["grpo", "grpo_schema", "ppo", "ppo_schema", "sft"])
    assert hydra_message(exc) == "unknown algo option algo=grop (did you mean grpo?); choose one of: grpo, ppo, sft"


@pytest.mark.parametrize(("exc", "message"), [
    (OSError(errno.ENOSPC, "No space left on device", "/runs/a/checkpoint-2/model.safetensors"),
     "cannot use /runs/a/checkpoint-2/model.safetensors: no space left on the device; free some space there or "
     "write elsewhere (trainer.output_dir=<folder>)"),
    (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/run"),
     "cannot use /mnt/ro/run: the file system is read-only; write elsewhere (trainer.output_dir=<folder>)"),
    (RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on "
                  "device\" })"), "cannot write: no space left on the device (Error while serializing"),
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/ckpt"), "/x/ckpt: no such file or folder"),
])
def test_file_system_refusals_are_user_errors_naming_the_path(exc, message):
    error = as_user_error(exc, "trainer.output_dir=<folder>")
    assert isinstance(error, StorageError) and isinstance(error, UserError)
    assert str(error).startswith(message)


def test_a_bug_stays_a_bug():
    assert as_user_error(ValueError("shape mismatch")) is None
    assert as_user_error(OSError(errno.EACCES, "Permission denied")) is None  # no path: not worded as storage


def test_user_errors_exit_with_code_2_and_bugs_pass_through(capsys, monkeypatch):
    monkeypatch.delenv("REASONING_RL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info, user_errors_exit("prog", "elsewhere"):
        raise ConfigError("trainer.steps must be >= 0, got -1")
    assert info.value.code == 2
    assert capsys.readouterr().err == "prog: trainer.steps must be >= 0, got -1\n"
    with pytest.raises(ZeroDivisionError), user_errors_exit("prog", "elsewhere"):
        raise ZeroDivisionError("a bug keeps its traceback and exit code 1")


def test_a_range_declared_by_a_field_is_checked():
    # the corrections' options declare their ranges beside them (CorrectionConfig), not in TRAIN_RANGES
    from reasoning_rl.config_checks import ConfigError
    from reasoning_rl.validation import validate
    from tests.reasoning_rl.conftest import tiny_config

    assert str(declared_ranges(GRPOConfig, "algo.")["algo.correction.c"]) == "> 0"
    cfg = tiny_config()
    cfg.algo.correction.name, cfg.algo.correction.c = "tis", -1.0
    with pytest.raises(ConfigError, match=r"algo.correction.c must be > 0, got -1.0"):
        validate(cfg)
