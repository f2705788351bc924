"""Rows to problems: a bad data file names the file, the line and what is wrong; missing fields
name the row, the field and the fields the row has; a split is never read from another's file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasoning_rl.errors import USER_ERROR_EXIT, UserError
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.data import (
    DatasetFieldError,
    TaskDataError,
    load_local_rows,
    load_problems,
    load_rows,
)
from reasoning_rl.tasks.definition import get_definition

REPO = Path(__file__).resolve().parents[3]
ROW = b'{"question": "1+1?", "answer": "#### 2"}\n'


@pytest.mark.parametrize("name, content, message", [
    ("train.jsonl", ROW + b'{"question": "2+2?", "answer": "#### 4"\n',
     r"train.jsonl, line 2: not valid JSON \(Expecting ',' delimiter at column 40\); each line must hold one JSON "
     r"object \(one row\): fix or remove the line"),
    ("train.jsonl", ROW + b"\n" + b'{"question": "x", answer: 1}\n',  # a blank line still counts as a line
     r"train.jsonl, line 3: not valid JSON \(Expecting property name enclosed in double quotes at column 19\)"),
    ("train.jsonl", b"",
     r"train.jsonl is empty: it should hold one JSON object \(one row\) a line; check the path, or write the file"),
    ("train.jsonl", b" \n\n", r"train.jsonl is empty"),
    ("train.jsonl", ROW + b'{"question": "caf\xe9?", "answer": "#### 4"}\n',  # Latin-1, not UTF-8
     r"train.jsonl, line 2: byte 0xe9 at column 18 is not UTF-8; save the file as UTF-8"),
    ("train.jsonl", ROW + b"[1, 2]\n", r"train.jsonl, line 2: an array, not an object; each line must hold one JSON object"),
    ("train.json", b'[\n  {"question": "1+1?", "answer": "#### 2"},\n  {"question": "2+2?", "answer": }\n]\n',
     r"train.json, line 3: not valid JSON \(Expecting value at column 34\); a .json dataset file holds one array"),
    ("train.json", b'[{"question": "1+1?", "answer": "#### 2"}, "2+2?"]', r"train.json: item 1 of the array is a string"),
    ("train.json", b"[]", r"train.json holds no rows"),
    ("train.parquet", b"PAR1 not a parquet file", r"train.parquet: cannot read it as Parquet rows \(.*magic bytes"),
])
def test_a_bad_data_file_names_the_file_the_line_and_what_is_wrong(tmp_path: Path, name, content, message) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TaskDataError, match=message) as error:
        load_local_rows(path)
    assert str(error.value).startswith(str(path)) and "\n" not in str(error.value)
    assert isinstance(error.value, UserError)


def test_a_missing_data_file_is_a_user_error_and_still_a_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(TaskDataError, match=r"dataset file '.*nowhere.jsonl' does not exist: check the path") as error:
        load_local_rows(tmp_path / "nowhere.jsonl")
    assert isinstance(error.value, FileNotFoundError)


def test_good_files_of_every_layout_load(tmp_path: Path) -> None:
    layouts = {
        "rows.jsonl": ROW + b"\n" + ROW,  # blank lines are skipped
        "array.json": b'[\n {"question": "1+1?", "answer": "#### 2"},\n {"question": "1+1?", "answer": "#### 2"}\n]',
        "lines.json": ROW + ROW,  # JSON Lines under .json
    }
    for name, content in layouts.items():
        (tmp_path / name).write_bytes(content)
        assert load_local_rows(tmp_path / name) == [{"question": "1+1?", "answer": "#### 2"}] * 2, name
    (tmp_path / "one.json").write_bytes(b'{\n  "question": "1+1?",\n  "answer": "#### 2"\n}\n')  # one row
    assert load_local_rows(tmp_path / "one.json") == [{"question": "1+1?", "answer": "#### 2"}]


def test_a_bad_data_file_stops_training_with_one_line_and_exit_code_2(tmp_path: Path) -> None:
    """Through the command line: `reasoning-rl-train: <file>, line <n>: ...` on stderr, nothing else."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"gsm8k_{split}.jsonl").write_bytes(ROW + b'{"question": "2+2?", "answer": "#### 4"\n')
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.pop("REASONING_RL_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", "task=gsm8k", f"task.data_dir={data}",
                           f"trainer.output_dir={tmp_path / 'run'}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == USER_ERROR_EXIT, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        f"reasoning-rl-train: {data / 'gsm8k_train.jsonl'}, line 2: not valid JSON (Expecting ',' delimiter at "
        "column 40); each line must hold one JSON object (one row): fix or remove the line"]


def test_missing_field_names_the_row_and_the_fields_it_has(tmp_path: Path) -> None:
    """The file's rows share one schema, so row 1 holds 'answer' as null: the message lists the
    fields the row has, not that null one."""
    data = tmp_path / "broken.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?"}\n')
    with pytest.raises(DatasetFieldError, match=r"gsm8k row 1 \(id 'gsm8k/1'\) of .*broken.jsonl: missing field "
                                                r"'answer' \(the row has: \['question'\]\)$"):
        load_problems(get_definition("gsm8k"), data_file=str(data))
    with pytest.raises(DatasetFieldError, match=r"row 0.*needs field 'question'"):
        data.write_text('{"problem": "1+1?", "answer": "#### 2"}\n')
        load_problems(get_definition("gsm8k"), data_file=str(data))


def test_a_row_without_the_prompt_field_is_refused_not_prompted_as_none(tmp_path: Path) -> None:
    """Row 1 lacks 'question': it is null there (the file's schema), and the prompt read "None\n..."."""
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"answer": "#### 4"}\n')
    with pytest.raises(DatasetFieldError, match=r"gsm8k row 1 of .*train.jsonl has no field\(s\) \['question'\]: "
                                                r"the template needs field 'question' \(the row has: \['answer'\]\)"):
        load_problems(get_definition("gsm8k"), data_file=str(data))


def test_a_hub_row_missing_a_field_names_the_dataset(monkeypatch) -> None:
    """Rows from the hub (datasets.load_dataset, replaced here: no network in tests) share one
    schema too: the missing field is null in the row and not among the fields it has."""
    import datasets

    rows = [{"question": "1+1?", "answer": "#### 2"}, {"question": "2+2?", "answer": None}]
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name, split: rows)
    with pytest.raises(DatasetFieldError, match=r"^gsm8k row 1 \(id 'gsm8k/1'\) of hf://openai/gsm8k/main\[test\]: "
                                                r"missing field 'answer' \(the row has: \['question'\]\)$"):
        load_problems(get_definition("gsm8k"), "test")


def test_missing_verifier_field_names_the_row_and_the_field(tmp_path: Path) -> None:
    data = tmp_path / "humaneval.jsonl"
    data.write_text('{"task_id": "HumanEval/0", "prompt": "def f():\\n", "entry_point": "f"}\n')
    with pytest.raises(DatasetFieldError, match=r"humaneval row 0 \(id 'HumanEval/0'\) of .*humaneval.jsonl: "
                                                r"missing field 'test' \(the row has: \['entry_point', 'prompt', "
                                                r"'task_id'\]\)"):
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


def _hashed_definition(tmp_path: Path, low: list[float], high: list[float]) -> Path:
    path = tmp_path / "hashed.yaml"
    path.write_text("name: hashed\nversion: 1\ndescription: d\nsource: {local_file: rows.jsonl}\n"
                    f"splits: {{low: {{hash_range: {low}}}, high: {{hash_range: {high}}}, all: {{}}}}\n"
                    "train_split: all\neval_split: low\nprompt_template: '{question}'\nanswer_field: answer\n"
                    "verifier: {name: math}\n")
    return path


def test_hash_ranges_partition_one_file_whatever_its_order(tmp_path: Path) -> None:
    rows = [f'{{"question": "{i} + 1?", "answer": "{i + 1}"}}\n' for i in range(200)]
    (tmp_path / "rows.jsonl").write_text("".join(rows))
    spec = get_definition(str(_hashed_definition(tmp_path, [0.0, 0.25], [0.25, 1.0])))
    low, high, every = ({p.prompt for p in load_problems(spec, s, data_dir=tmp_path)[0]} for s in ("low", "high", "all"))
    assert not low & high and low | high == every
    assert 20 < len(low) < 80  # about a quarter of 200 (a binomial's sd is ~6)
    (tmp_path / "rows.jsonl").write_text("".join(reversed(rows)))  # a reordered file: the same problems per split
    assert {p.prompt for p in load_problems(spec, "low", data_dir=tmp_path)[0]} == low


def test_gsm8k_fit_validation_and_test_share_no_problem(shared_data_dir: Path) -> None:
    spec = get_definition("gsm8k")
    prompts = {s: [p.prompt for p in load_problems(spec, s, data_dir=shared_data_dir)[0]]
               for s in ("train", "fit", "validation", "test")}
    fit, validation, test = (set(prompts[s]) for s in ("fit", "validation", "test"))
    assert not fit & validation and not (fit | validation) & test
    assert fit | validation == set(prompts["train"])
    assert (len(prompts["fit"]), len(prompts["validation"])) == (7104, 369)  # the counts the definition states


def test_mawps_direct_fit_validation_and_heldout_partition_mawps(shared_data_dir: Path) -> None:
    """The real-model recipe trains on `fit`, chooses on `validation` and reports `heldout` (docs/real_model.md)."""
    spec = get_definition("mawps_direct")
    prompts = {s: [p.prompt for p in load_problems(spec, s, data_dir=shared_data_dir)[0]]
               for s in ("test", "fit", "validation", "heldout")}
    fit, validation, heldout = (set(prompts[s]) for s in ("fit", "validation", "heldout"))
    assert not fit & validation and not (fit | validation) & heldout
    assert fit | validation | heldout == set(prompts["test"])
    assert [len(prompts[s]) for s in ("fit", "validation", "heldout")] == [798, 221, 1046]  # as the definition states

    def normal(prompt: str) -> str:
        return " ".join(prompt.lower().split())

    # MAWPS repeats a few problems with other capitals or spacing: one heldout problem is a fit problem so
    # written, which docs/real_model.md states; none is a validation problem.
    assert len({normal(p) for p in fit} & {normal(p) for p in heldout}) == 1
    assert not {normal(p) for p in validation} & {normal(p) for p in heldout}
