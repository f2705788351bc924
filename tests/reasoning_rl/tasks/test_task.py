"""Tasks: arithmetic splits never overlap, local files load, bad rows and sources fail clearly;
the default task's rows are pinned; one definition feeds training and evaluation alike."""

import json
from pathlib import Path

import pytest

from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task, TaskDataError, make_arithmetic_dataset
from reasoning_rl.tasks.data import load_problems
from reasoning_rl.tasks.definition import get_definition


def definition_file(folder: Path, name: str, splits: str, template: str = "{q} =", answer: str = "a") -> str:
    """A definition YAML of one's own (``task.name=<path>``), for tasks that are not shipped."""
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\nversion: 1\ndescription: test data\nsplits: {splits}\ntrain_split: train\n"
                    f"eval_split: null\nprompt_template: '{template}'\nanswer_field: {answer}\n"
                    "verifier: {name: math}\n")
    return str(path)


def test_arithmetic_train_and_test_never_share_a_problem():
    train = {r["question"] for r in make_arithmetic_dataset(5000, 0, "train")}
    test = {r["question"] for r in make_arithmetic_dataset(5000, 1, "test", cycle=False)}
    assert train and test and not train & test


def test_arithmetic_answers_are_right():
    for row in make_arithmetic_dataset(50, 3, "train"):
        a, op, b = row["question"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def test_held_out_problems_are_not_repeated():
    cfg = TaskConfig(prompt_template="{question} Answer: ", max_eval_examples=None,
                     source_kwargs={"max_operand": 9, "operations": "+", "num_examples": 500})
    questions = [e.prompt for e in Task(cfg).examples("test")]
    assert len(questions) == len(set(questions)) < 500


def test_local_jsonl_task_and_missing_field(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"q": f"{i} + 1", "a": str(i + 1)}) + "\n" for i in range(3)))
    toy = definition_file(tmp_path, "toy", "{train: {local_file: train.jsonl}}")
    cfg = TaskConfig(name=toy, data_files={"train": str(path)})
    examples = Task(cfg).examples("train")
    assert [e.prompt for e in examples] == ["0 + 1 =", "1 + 1 =", "2 + 1 ="]
    assert examples[2].reference == "3"
    cfg.prompt_template = "{question} ="
    with pytest.raises(TaskDataError, match=r"toy row 0 of .*train.jsonl has no field\(s\) \['question'\]"):
        Task(cfg).examples("train")


def test_data_dir_switches_a_hub_task_to_local_copies(shared_data_dir):
    cfg = TaskConfig(name="gsm8k", data_dir=str(shared_data_dir), max_eval_examples=5)
    examples = Task(cfg).examples("test")
    # The reference is the number after "####", as in evaluation (it used to be the whole solution).
    assert len(examples) == 5 and examples[0].reference == "18"


def test_unknown_source_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown source"):
        Task(TaskConfig(name=definition_file(tmp_path, "ftp", "{train: {}}")))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Task(TaskConfig(name="gsm8k", data_files={"train": "/no/such.jsonl"})).examples("train")


def test_default_task_rows_are_the_default_runs_rows():
    """The default run's numbers depend on these rows, in this order: training rows from seed 0
    (cycled), held-out rows from seed 1 (each once), prompt "{question} Answer: ", the answer string
    as reference, the math verifier alone with default options, none_policy propagate."""
    task = Task(TaskConfig())
    grid = {"max_operand": 20, "operations": "+", "test_fraction": 0.2}
    expected = {
        "train": make_arithmetic_dataset(4000, seed=0, split="train", cycle=True, **grid),
        "test": make_arithmetic_dataset(200, seed=1, split="test", cycle=False, **grid),
    }
    assert (task.train_split, task.eval_split) == ("train", "test")
    for split, rows in expected.items():
        examples = task.examples(split)
        assert [(e.prompt, e.reference, e.fields) for e in examples] == \
            [(f"{r['question']} Answer: ", r["answer"], {}) for r in rows], split
    # Pinned as well, so a change inside the generator cannot move both sides at once.
    assert [e.prompt for e in task.examples("train")[:3]] == \
        ["What is 9 + 9? Answer: ", "What is 15 + 10? Answer: ", "What is 15 + 19? Answer: "]
    held_out = task.examples("test")
    assert len(held_out) == 82 and held_out[0].prompt == "What is 12 + 12? Answer: "
    reward = task.reward()
    assert [(s.name, s.weight, s.options) for s in reward.specs] == [("math", 1.0, {})]
    assert reward.none_policy == "propagate"


@pytest.mark.parametrize(("name", "split", "limit"), [("arithmetic", "test", None), ("gsm8k", "test", 20),
                                                      ("gsm8k", "train", 20), ("math500", "test", 20),
                                                      ("humaneval", "test", 5), ("mbpp", "test", 5)])
def test_one_definition_feeds_training_and_evaluation(name, split, limit, shared_data_dir):
    """A training example and the benchmark problem of the same row: same id, prompt, reference, fields."""
    problems, _ = load_problems(get_definition(name), split, data_dir=shared_data_dir, limit=limit)
    cfg = TaskConfig(name=name, data_dir=str(shared_data_dir), max_train_examples=limit, max_eval_examples=limit,
                     train_split=split, allow_train_on_eval=True)
    examples = Task(cfg).examples(split)
    assert [(e.id, e.prompt, e.reference, e.fields) for e in examples] == \
        [(p.task_id, p.prompt, p.reference, p.fields) for p in problems]
    assert problems and all(p.reference is not None or p.fields for p in problems)


def test_training_on_what_evaluation_measures_is_refused(shared_data_dir, caplog):
    with pytest.raises(TaskDataError, match=r"task 'math500' has no training split"):
        Task(TaskConfig(name="math500"))
    with pytest.raises(TaskDataError, match=r"train split 'test' is a split evaluation measures.*"
                                            r"task.allow_train_on_eval=true"):
        Task(TaskConfig(name="math500", train_split="test"))
    with pytest.raises(TaskDataError, match=r"train split 'test' is a split evaluation measures"):
        Task(TaskConfig(name="gsm8k", train_split="test", eval_split="train"))
    with caplog.at_level("WARNING"):
        task = Task(TaskConfig(name="math500", train_split="test", allow_train_on_eval=True,
                               data_dir=str(shared_data_dir)))
    assert task.train_split == task.eval_split == "test" and "would not be held out" in caplog.text


def test_rewards_start_with_the_definitions_verifier():
    listed = [{"name": "math", "weight": 1.0, "options": {"strict": True}}, {"name": "format", "weight": 0.1}]
    specs = Task(TaskConfig(name="gsm8k", rewards=listed)).reward_specs
    assert [(s.name, s.weight, s.options) for s in specs] == [("math", 1.0, {"strict": True}), ("format", 0.1, {})]
    # Not listed: measured first (accuracy), with weight 0 so the reward is what the list says.
    specs = Task(TaskConfig(rewards=[{"name": "format", "options": {"pattern": "[0-9]"}}])).reward_specs
    assert [(s.name, s.weight) for s in specs] == [("math", 0.0), ("format", 1.0)]
    with pytest.raises(ValueError, match=r"lists the definition's verifier 'math' after 'format'"):
        Task(TaskConfig(rewards=[{"name": "format"}, {"name": "math"}]))


def test_chat_template_wraps_training_prompts():
    class ChatTokenizer:
        chat_template = "set"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return " | ".join(f"{m['role']}: {m['content']}" for m in messages)

    cfg = TaskConfig(use_chat_template=True, system_prompt="Be brief.", max_eval_examples=1)
    [example] = Task(cfg).examples("test", ChatTokenizer())
    assert example.prompt == "system: Be brief. | user: What is 12 + 12? Answer: "
    with pytest.raises(ValueError, match=r"task\.use_chat_template=true"):
        Task(cfg).examples("test")
