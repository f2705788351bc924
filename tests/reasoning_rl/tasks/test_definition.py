"""Dataset definitions: the shipped set, loud errors on unknown names and keys, splits that exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasoning_rl.errors import UserError
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.definition import (
    DefinitionError,
    DefinitionNotFoundError,
    get_definition,
    list_definitions,
    parse_definition,
)


def test_every_shipped_benchmark_is_listed() -> None:
    assert list_definitions() == ["aime24", "arithmetic", "arithmetic_wide", "code_synthetic", "code_synthetic_feedback",
                                 "gsm8k", "gsm8k_tool", "humaneval", "math", "math500", "mawps_direct", "mbpp", "mbpp_feedback",
                                 "mbpp_sanitized", "multiply",
                                 "multiply_tool", "stdio_code"]


def test_unknown_benchmark_suggests_close_names() -> None:
    with pytest.raises(DefinitionNotFoundError, match=r"Did you mean 'gsm8k'.*Known benchmarks: aime24"):
        get_definition("gsm8", kind="benchmark")


def test_unknown_task_name_lists_the_known_ones() -> None:
    with pytest.raises(DefinitionNotFoundError, match=r"unknown task 'maths'\. Did you mean 'math'.*"
                                                      r"Known tasks: aime24, arithmetic, arithmetic_wide, code_synthetic, "
                                                      r"code_synthetic_feedback, gsm8k, gsm8k_tool, humaneval, "):
        Task(TaskConfig(name="maths"))


def test_unknown_definition_key_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['promt'\]"):
        parse_definition({"name": "x", "version": 1, "description": "", "source": {}, "prompt_template": "",
                          "answer_field": "a", "verifier": {"name": "math"}, "promt": "typo"})


BASE = {"name": "x", "version": 1, "description": "", "prompt_template": "{q}", "answer_field": "a",
        "verifier": {"name": "math"}, "train_split": "train", "eval_split": "test",
        "splits": {"train": {"local_file": "x_train.jsonl"}, "test": {"local_file": "x_test.jsonl"}}}


@pytest.mark.parametrize(("change", "message"), [
    ({"eval_split": "validation"}, r"eval_split 'validation' is not one of its splits \['train', 'test'\]"),
    ({"splits": {"train": {}, "test": {"local_file": "t.jsonl"}}}, r"split 'train': unknown source"),
    ({"splits": {"train": {"path": "a/b", "generator": "m:f"}, "test": {"path": "a/b"}}}, r"unknown source"),
    ({"answer_extractor": "gsm8k"}, r"unknown answer_extractor 'gsm8k'; known: \['gsm8k_final'"),
    ({"metrics": ["pass@k", "bleu"]}, r"unknown metric\(s\) \['bleu'\]"),
    ({"splits": {"train": {"local_file": "x.jsonl", "splt": "t"}, "test": {"local_file": "x.jsonl"}}},
     r"split 'train': unknown key\(s\) \['splt'\]"),
])
def test_bad_definitions_say_what_is_wrong(change: dict, message: str) -> None:
    with pytest.raises(DefinitionError, match=message) as error:
        parse_definition({**BASE, **change})
    assert isinstance(error.value, (UserError, ValueError))  # one line and exit 2; old except clauses still work


GOOD_YAML = """name: mine
version: 1
description: my questions
splits:
  test:
    local_file: mine.jsonl
eval_split: test
train_split: null
prompt_template: "{q}"
answer_field: a
verifier:
  name: math
"""


@pytest.mark.parametrize(("content", "message"), [
    (GOOD_YAML.replace("answer_field: a", "answer_field: a: b").encode(),
     r"mine.yaml, line 10, column 16: not valid YAML \(mapping values are not allowed here\); fix the file "
     r"\(docs/tasks.md"),
    (GOOD_YAML.replace("my questions", "caf\xe9").encode("latin-1"), r"mine.yaml: byte 0xe9 at offset \d+ is not UTF-8"),
    (b"", r"mine.yaml holds nothing, not a mapping of keys"),
    (b"- name: mine\n", r"mine.yaml holds list, not a mapping of keys"),
    (GOOD_YAML.replace("  test:\n    local_file: mine.jsonl", "  - test").encode(),
     r"mine.yaml: `splits` must map each split's name to its source keys"),
    (GOOD_YAML.replace("answer_field", "answer_fild").encode(), r"mine.yaml: unknown key\(s\) \['answer_fild'\]"),
])
def test_a_bad_definition_file_names_the_file_and_what_is_wrong(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_bytes(GOOD_YAML.encode())
    assert get_definition(str(path)).name == "mine"  # the good file loads
    path.write_bytes(content)
    with pytest.raises(DefinitionError, match=message) as error:
        get_definition(str(path))
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
    with pytest.raises(FileNotFoundError, match=r"dataset definition file '.*other.yaml' does not exist"):
        get_definition(str(tmp_path / "other.yaml"))


def test_shared_source_keys_merge_into_each_split() -> None:
    spec = parse_definition({**BASE, "source": {"path": "org/ds", "name": "main", "kwargs": {"a": 1, "b": 2}},
                             "splits": {"train": {"kwargs": {"b": 3}}, "test": {"split": "validation"}}})
    assert (spec.splits["train"].path, spec.splits["train"].name, spec.splits["train"].split) == ("org/ds", "main", "train")
    assert spec.splits["train"].kwargs == {"a": 1, "b": 3}
    assert spec.splits["test"].split == "validation"  # the hub's name for the split may differ from its key


def test_evaluation_sets_have_no_training_split() -> None:
    for name in ("math500", "aime24", "humaneval"):
        assert get_definition(name).train_split is None, name
    for name in list_definitions():
        spec = get_definition(name)
        assert spec.eval_split in spec.splits and spec.train_split in (None, *spec.splits), name
        assert spec.train_split != spec.eval_split, name


def test_every_local_file_named_exists_in_the_shared_data(shared_data_dir: Path) -> None:
    for name in list_definitions():
        for split, source in get_definition(name).splits.items():
            if source.local_file and source.path:  # a local copy of a hub dataset (stdio_code's files are yours)
                assert (shared_data_dir / source.local_file).exists(), (name, split, source.local_file)


def test_a_definition_file_of_your_own(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nversion: 1\ndescription: d\nsplits: {train: {local_file: t.jsonl}}\n"
                    "train_split: train\neval_split: null\nprompt_template: '{q}'\nanswer_field: a\n"
                    "verifier: {name: math}\n")
    assert get_definition(str(path)).splits["train"].local_file == "t.jsonl"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_definition(str(tmp_path / "absent.yaml"))


@pytest.mark.parametrize("bad", [[0.5, 0.5], [-0.1, 0.5], [0.2, 1.5], [0.1]])
def test_a_hash_range_outside_zero_one_is_refused(bad: list[float]) -> None:
    with pytest.raises(DefinitionError, match=r"split 'train': hash_range must be \[lo, hi\) with 0 <= lo < hi <= 1"):
        parse_definition({**BASE, "splits": {"train": {"local_file": "t.jsonl", "hash_range": bad}}})
