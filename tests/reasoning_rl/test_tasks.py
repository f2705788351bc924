"""Tasks: arithmetic splits never overlap, local files load, bad rows and sources fail clearly."""

import json

import pytest

from reasoning_rl.tasks import Task, TaskConfig, TaskDataError, make_arithmetic_dataset


def test_arithmetic_train_and_test_never_share_a_problem():
    train = {r["question"] for r in make_arithmetic_dataset(5000, 0, "train")}
    test = {r["question"] for r in make_arithmetic_dataset(5000, 1, "test", cycle=False)}
    assert train and test and not train & test


def test_arithmetic_answers_are_right():
    for row in make_arithmetic_dataset(50, 3, "train"):
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_held_out_problems_are_not_repeated():
    cfg = TaskConfig(prompt_template="{question} Answer: ")
    cfg.arithmetic.max_operand, cfg.arithmetic.operations, cfg.arithmetic.num_eval = 9, "+", 500
    questions = [e.prompt for e in Task(cfg).examples("test")]
    assert len(questions) == len(set(questions)) < 500


def test_local_jsonl_task_and_missing_field(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"q": f"{i} + 1", "a": str(i + 1)}) + "\n" for i in range(3)))
    cfg = TaskConfig(name="toy", source="files", data_files={"train": str(path)}, prompt_template="{q} =",
                     answer_field="a")
    examples = Task(cfg).examples("train")
    assert [e.prompt for e in examples] == ["0 + 1 =", "1 + 1 =", "2 + 1 ="]
    assert examples[2].reference == "3"
    cfg.prompt_template = "{question} ="
    with pytest.raises(TaskDataError, match=r"row 0 has no field\(s\) \['question'\]"):
        Task(cfg).examples("train")


def test_data_dir_switches_a_hub_task_to_local_copies(shared_data_dir):
    cfg = TaskConfig(name="gsm8k", source="hub", hub_name="openai/gsm8k", hub_config="main",
                     data_dir=str(shared_data_dir), local_files={"test": "gsm8k_test.jsonl"},
                     max_eval_examples=5)
    examples = Task(cfg).examples("test")
    assert len(examples) == 5 and "####" in examples[0].reference


def test_unknown_source_and_missing_file():
    with pytest.raises(ValueError, match="unknown source"):
        Task(TaskConfig(source="ftp"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Task(TaskConfig(source="files", data_files={"train": "/no/such.jsonl"})).examples("train")
