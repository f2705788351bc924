"""Code tasks for training: the synthetic one-line functions, MBPP and stdin/stdout files feed the
sandboxed `code` verifier through the same Task path as the math tasks; references pass, wrong
programs fail, held-out problems are never trained on, bad rows name the row."""

import json

import pytest

from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task, TaskDataError
from reasoning_rl.tasks.code_synthetic import OPERATIONS, TEST_INPUTS, make_code_dataset
from rewards.pool import WorkerPool


def score(task: Task, completions: list[str], examples) -> list[float | None]:
    """The training reward of ``completions[i]`` for ``examples[i]``, as a GRPO step scores it."""
    pool = WorkerPool(1)
    try:
        return task.reward().score(completions, [e.reference for e in examples], [e.fields for e in examples],
                                   timeout=60, pool=pool).rewards
    finally:
        pool.close()


def test_synthetic_train_and_test_never_share_a_function():
    train = {r["id"] for r in make_code_dataset(4000, 0, "train")}
    test = [r["id"] for r in make_code_dataset(1000, 1, "test", cycle=False)]
    assert len(test) == len(set(test)) == 239 and len(train) == 751 and not train & set(test)


def test_hidden_inputs_tell_every_two_different_functions_apart():
    grid = [(op, c) for op in OPERATIONS.values() for c in range(1, 31)]
    for i, (op, c) in enumerate(grid):
        for op2, d in grid[i + 1:]:
            if all(op.fn(x, c) == op2.fn(x, d) for x in TEST_INPUTS):
                # agreeing on the hidden inputs is allowed only for the same function (x // 1 is x * 1)
                assert all(op.fn(x, c) == op2.fn(x, d) for x in range(-1000, 1001)), (op.code, c, op2.code, d)


def test_synthetic_references_pass_and_wrong_expressions_get_partial_credit():
    task = Task(TaskConfig(name="code_synthetic", max_eval_examples=None))
    e = next(e for e in task.examples("test") if e.id.startswith("code_synthetic/min/"))
    c = int(e.id.rsplit("/", 1)[1])
    assert e.prompt == f'def f(x):\n    """Return the smaller of x and {c}."""\n    return '
    assert e.reference == f"min(x, {c})"
    # `x` agrees with min(x, c) on the hidden inputs up to c: partial credit is that share of the 9 tests.
    share = sum(x <= c for x in TEST_INPUTS) / len(TEST_INPUTS)
    assert score(task, [e.reference, "x", "x +", "x + 1000"], [e] * 4) == pytest.approx([1.0, share, 0.0, 0.0])


def test_synthetic_operations_can_be_narrowed_and_unknown_ones_are_named():
    rows = make_code_dataset(50, 0, "train", operations="add,max")
    assert {r["id"].split("/")[1] for r in rows} <= {"add", "max"}
    with pytest.raises(ValueError, match=r"unknown code_synthetic operations \['pow'\]"):
        make_code_dataset(5, 0, "train", operations="add,pow")


def test_mbpp_trains_on_601_974_and_holds_out_11_510(shared_data_dir):
    task = Task(TaskConfig(name="mbpp", data_dir=str(shared_data_dir), max_train_examples=None, max_eval_examples=None))
    train, test = task.examples("train"), task.examples("test")
    assert len(train) == 374 and len(test) == 500
    assert all(601 <= int(e.id) <= 974 for e in train) and all(11 <= int(e.id) <= 510 for e in test)
    rows = {int(e.id): e for e in train[:2]}
    e = next(iter(rows.values()))
    assert "Your code should pass these tests" in e.prompt and e.fields["test_list"]


def test_mbpp_reward_runs_the_program_in_the_sandbox(shared_data_dir):
    from reasoning_rl.tasks.data import load_problems
    from reasoning_rl.tasks.definition import get_definition

    problems, _ = load_problems(get_definition("mbpp"), "train", data_dir=shared_data_dir, limit=1)
    task = Task(TaskConfig(name="mbpp", data_dir=str(shared_data_dir), max_train_examples=1))
    e = task.examples("train")[0]
    reference = f"Here it is:\n```python\n{problems[0].row['code']}\n```"
    assert score(task, [reference, "```python\ndef nothing():\n    pass\n```"], [e, e]) == [1.0, 0.0]


def stdio_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_stdio_task_from_local_files(tmp_path):
    rows = [{"id": "sum", "question": "Print the sum of two integers.", "inputs": ["1 2\n", "-5 5\n"],
             "outputs": ["3\n", "0\n"]}]
    files = {"train": stdio_file(tmp_path / "train.jsonl", rows), "test": stdio_file(tmp_path / "test.jsonl", rows)}
    task = Task(TaskConfig(name="stdio_code", data_files=files, allow_train_on_eval=True))
    e = task.examples("test")[0]
    assert "standard input" in e.prompt and e.fields == {"inputs": rows[0]["inputs"], "outputs": rows[0]["outputs"]}
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    wrong = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
    assert score(task, [right, wrong], [e, e]) == [1.0, 0.0]


def test_stdio_row_without_outputs_names_the_row_and_field(tmp_path):
    files = {"train": stdio_file(tmp_path / "t.jsonl", [{"id": "a", "question": "q", "inputs": ["1\n"]}])}
    task = Task(TaskConfig(name="stdio_code", data_files={**files, "test": files["train"]}, allow_train_on_eval=True))
    with pytest.raises(TaskDataError, match=r"stdio_code row 0 \(id 'a'\) of .*t.jsonl: missing field 'outputs'"):
        task.examples("train")


def test_stdio_task_without_files_says_where_they_go():
    task = Task(TaskConfig(name="stdio_code"))
    with pytest.raises(TaskDataError, match=r"local file only \(stdio_train.jsonl\): pass data_dir="):
        task.examples("train")
