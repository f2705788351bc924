"""Rows to problems: missing fields name the row and the field; a split is never read from another's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasoning_rl.tasks import Task, TaskConfig
from reasoning_rl.tasks.data import DatasetFieldError, TaskDataError, load_problems, load_rows
from reasoning_rl.tasks.definition import get_definition


def test_missing_field_names_the_row_and_the_field(tmp_path: Path) -> None:
    data = tmp_path / "broken.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?"}\n')
    with pytest.raises(DatasetFieldError, match=r"gsm8k row 1 \(id 'gsm8k/1'\): missing field 'answer'"):
        load_problems(get_definition("gsm8k"), data_file=str(data))
    with pytest.raises(DatasetFieldError, match=r"row 0.*needs field 'question'"):
        data.write_text('{"problem": "1+1?", "answer": "#### 2"}\n')
        load_problems(get_definition("gsm8k"), data_file=str(data))


def test_missing_verifier_field_names_the_row_and_the_field(tmp_path: Path) -> None:
    data = tmp_path / "humaneval.jsonl"
    data.write_text('{"task_id": "HumanEval/0", "prompt": "def f():\\n", "entry_point": "f"}\n')
    with pytest.raises(DatasetFieldError, match=r"humaneval row 0 \(id 'HumanEval/0'\): missing field 'test' "
                                                r"\(row fields: \['entry_point', 'prompt', 'task_id'\]\)"):
        load_problems(get_definition("humaneval"), data_file=str(data))


def test_math_train_is_refused_offline_with_what_to_do(shared_data_dir: Path) -> None:
    """Only MATH *test* is local; MATH-500 is a subset of it, so it must never stand in for MATH train."""
    with pytest.raises(TaskDataError) as error:
        Task(TaskConfig(name="math", data_dir=str(shared_data_dir)))
    message = str(error.value)
    assert "'math' split 'train' (MATH train" in message and "has no local copy" in message
    assert "math_test.jsonl: split 'test' (MATH test, 5,000 problems; MATH-500 is a subset of it)" in message
    assert "DigitalLearningGmbH/MATH-lighteval[train]" in message and "+task.data_files.train=<file>" in message
    # The same rule in evaluation: `split=train` with data_dir is refused the same way.
    with pytest.raises(TaskDataError, match="has no local copy"):
        load_rows(get_definition("math"), "train", data_dir=shared_data_dir)


def test_math_trains_on_a_given_train_file_and_holds_out_math500(shared_data_dir: Path, tmp_path: Path) -> None:
    train = tmp_path / "math_train.jsonl"
    train.write_text('{"problem": "1+1?", "solution": "It is $\\\\boxed{2}$.", "level": "Level 1", '
                     '"type": "Algebra"}\n')
    task = Task(TaskConfig(name="math", eval_split="math500:test", data_dir=str(shared_data_dir),
                           data_files={"train": str(train)}, max_eval_examples=3))
    [example] = task.examples(task.train_split)
    assert example.reference == "2" and example.prompt.startswith("1+1?\nPlease reason step by step")
    held_out = task.examples(task.eval_split)
    assert [e.id for e in held_out] == ["test/precalculus/807.json", "test/intermediate_algebra/1994.json",
                                        "test/algebra/2584.json"]


def test_ids_must_be_unique_in_evaluation(tmp_path: Path) -> None:
    data = tmp_path / "aime.jsonl"
    data.write_text('{"id": 1, "problem": "p", "answer": "1"}\n{"id": 1, "problem": "q", "answer": "2"}\n')
    with pytest.raises(TaskDataError, match="problem id '1' appears twice"):
        load_problems(get_definition("aime24"), data_file=data)


def test_generator_kwargs_apply_to_generated_data_only() -> None:
    rows, origin = load_rows(get_definition("arithmetic"), "test", source_kwargs={"max_operand": 3})
    assert rows and all(max(int(t) for t in r["question"][8:-1].split(" + ")) <= 3 for r in rows)
    assert '"max_operand": 3' in origin
    with pytest.raises(TaskDataError, match="source_kwargs"):
        load_rows(get_definition("gsm8k"), "test", source_kwargs={"max_operand": 3})
