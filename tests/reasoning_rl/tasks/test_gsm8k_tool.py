"""``gsm8k_tool``'s warm-start episodes: GSM8K's calculator annotations as python_tool calls.

Hand-worked rows in GSM8K's format: each annotation ``<<expression=value>>`` becomes a ``print`` in a
```python block whose output block is what python_tool really answers (checked against
PythonTool.step in the sandbox); rows that cannot be converted keep the plain worked answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reasoning_rl.envs.python_tool import STOP, PythonTool
from reasoning_rl.policy.loading import build_char_tokenizer
from reasoning_rl.settings.evaluation import WarmStartConfig
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task
from reasoning_rl.tasks.data import TaskDataError
from reasoning_rl.tasks.gsm8k_tool import (
    NotArithmeticError,
    add_episodes,
    evaluate,
    make_gsm8k_tool_rows,
    plain_answer,
    tool_episode,
)
from reasoning_rl.warmstart import environment_observations, masked_target, warm_start_targets

NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
           "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")
# Three annotated lines, a preface line before the first and a closing line without an annotation.
FLOWERS = ("Ten flowers are yellow.\n"
           "There are 80/100 * 10 = <<80/100*10=8>>8 more purple flowers.\n"
           "So there are 10 + 8 = <<10+8=18>>18 purple flowers.\n"
           "In total 10 + 18 = <<10+18=28>>28 flowers.\n"
           "That is all of them.\n#### 28")
ROUNDED = "Each gets 10/3 = <<10/3=3.33>>3.33 cakes.\n#### 3.33"  # GSM8K's rounding: 3.3333... != 3.33
NO_ANNOTATION = "He has 5 apples and eats 2, so 3 are left.\n#### 3"


@pytest.mark.parametrize(("expression", "value"), [
    ("48/2", 24.0),          # true division: a float, printed "24.0"
    ("7//2", 3), ("7 % 4", 3), ("2**10", 1024),
    ("100-50-30-15", 5), ("(3+4)*2 - 1", 13), ("-3+5", 2),
    (".3-.25", 0.04999999999999999),  # Python's own float result, as print writes it
])
def test_evaluate_is_pythons_arithmetic(expression, value):
    result = evaluate(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(("expression", "message"), [
    ("05*2", "not a Python expression"),     # a leading zero is a SyntaxError in Python 3
    ("1,000*2", "holds Tuple"),               # a thousands separator makes a tuple
    ("x+1", "holds Name"),
    ("__import__('os').getcwd()", "holds Call"),
    ("3/0", "division by zero"),
    ("9**999", "exponent 999 is above 64"),
])
def test_evaluate_refuses_what_is_not_arithmetic_on_numbers(expression, message):
    with pytest.raises(NotArithmeticError, match=message):
        evaluate(expression)


def test_annotations_become_print_blocks_with_the_output_python_prints():
    # 2 annotated lines, max_calls=2: one call each; 48/2 is a float in Python, so the output says 24.0.
    assert tool_episode(NATALIA) == (
        "```python\nprint(48/2)\n```\n```output\n24.0\n```\n"
        "Natalia sold 48/2 = 24 clips in May.\n"
        "```python\nprint(48+24)\n```\n```output\n72\n```\n"
        "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
        "The final answer is \\boxed{72}.")
    # max_calls=1: both expressions in one block, two printed lines.
    assert tool_episode(NATALIA, max_calls=1) == (
        "```python\nprint(48/2)\nprint(48+24)\n```\n```output\n24.0\n72\n```\n"
        "Natalia sold 48/2 = 24 clips in May.\n"
        "Natalia sold 48+24 = 72 clips altogether in April and May.\n"
        "The final answer is \\boxed{72}.")


def test_three_annotated_lines_in_two_calls_the_first_taking_two():
    # divmod(3, 2) = (1, 1): the first call prints lines 1-2, the second line 3; the preface line comes
    # before the first block and the closing line without an annotation stays with the last group.
    assert tool_episode(FLOWERS) == (
        "Ten flowers are yellow.\n"
        "```python\nprint(80/100*10)\nprint(10+8)\n```\n```output\n8.0\n18\n```\n"
        "There are 80/100 * 10 = 8 more purple flowers.\n"
        "So there are 10 + 8 = 18 purple flowers.\n"
        "```python\nprint(10+18)\n```\n```output\n28\n```\n"
        "In total 10 + 18 = 28 flowers.\n"
        "That is all of them.\n"
        "The final answer is \\boxed{28}.")
    assert tool_episode(FLOWERS, max_calls=5).count(STOP) == 3  # never more calls than annotated lines


def test_rows_that_cannot_be_converted_keep_the_plain_worked_answer():
    assert tool_episode(ROUNDED) is None                       # 10/3 prints 3.3333333333333335, not 3.33
    assert tool_episode(NO_ANNOTATION) is None
    assert tool_episode("It is <<2x3=6>>6.\n#### 6") is None  # "2x3" is not Python
    assert tool_episode("It is <<6>>6.\n#### 6") is None      # no "=": not expression=value
    assert plain_answer(ROUNDED) == "Each gets 10/3 = 3.33 cakes.\nThe final answer is \\boxed{3.33}."
    rows = [{"answer": NATALIA}, {"answer": ROUNDED}, {"answer": NO_ANNOTATION}]
    counts = add_episodes(rows)
    assert (counts.tool, counts.plain) == (1, 2)
    assert [r["tool_calls"] for r in rows] == [2, 0, 0]
    assert rows[0]["episode"] == tool_episode(NATALIA)
    assert rows[2]["episode"] == ("He has 5 apples and eats 2, so 3 are left.\n"
                                  "The final answer is \\boxed{3}.")


def _episodes(shared_data_dir: Path | None) -> list[str]:
    """The hand rows' episodes, and the first 4 GSM8K train rows' when the shared data is there."""
    answers = [NATALIA, FLOWERS]
    if shared_data_dir is not None:
        with open(shared_data_dir / "gsm8k_train.jsonl", encoding="utf-8") as f:
            answers += [json.loads(next(f))["answer"] for _ in range(4)]
    return [e for e in (tool_episode(a) for a in answers) if e is not None]


def test_each_output_block_is_what_python_tool_answers_in_the_sandbox():
    from tests.conftest import SHARED_DATA

    env = PythonTool(timeout=5)
    episodes = _episodes(SHARED_DATA)
    assert len(episodes) == (6 if SHARED_DATA is not None else 2)
    for episode in episodes:
        spans = env.observation_spans(episode)
        assert len(spans) == episode.count(STOP)
        for start, end in spans:
            # step() gets the text up to the stop marker (the turns so far) and runs its last block.
            step = env.step(episode[:start])
            assert step.tool == "ok" and episode[start:end] == step.observation


def test_observation_spans_cover_exactly_the_output_blocks_and_the_warm_start_masks_them():
    episode = tool_episode(NATALIA)
    spans = PythonTool().observation_spans(episode)
    assert [episode[a:b] for a, b in spans] == ["\n24.0\n```\n", "\n72\n```\n"]
    tok = build_char_tokenizer()  # one token per character
    target = masked_target(tok, episode, spans)
    masked = "".join(c for c, m in zip(episode, target.loss_mask) if not m)
    assert masked == "\n24.0\n```\n\n72\n```\n"
    assert sum(target.loss_mask) == len(episode) - len(masked) + 1  # every other character, and EOS


def _write_rows(folder: Path, answers: list[str]) -> None:
    rows = [{"question": f"Question {i}?", "answer": a} for i, a in enumerate(answers)]
    (folder / "gsm8k_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "gsm8k_test.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")


def test_the_definitions_warm_start_target_is_the_tool_episode(tmp_path):
    _write_rows(tmp_path, [NATALIA, ROUNDED])
    task = Task(TaskConfig(name="gsm8k_tool", data_dir=str(tmp_path), use_chat_template=False))
    examples = task.examples("train")
    assert [e.reference for e in examples] == ["72", "3.33"]
    assert examples[0].prompt.endswith("Problem: Question 0?\n")
    targets = warm_start_targets(examples, WarmStartConfig(target="solution"))
    assert [t.solution for t in targets] == [tool_episode(NATALIA), plain_answer(ROUNDED)]
    # The spans the masked warm start leaves out are python_tool's, found in the target.
    spans_of = environment_observations("python_tool", {})
    assert [targets[0].solution[a:b] for a, b in spans_of(targets[0])] == ["\n24.0\n```\n", "\n72\n```\n"]
    assert spans_of(targets[1]) == []


def test_the_targets_score_one_with_the_tasks_verifier(tmp_path):
    _write_rows(tmp_path, [NATALIA, FLOWERS, ROUNDED])
    task = Task(TaskConfig(name="gsm8k_tool", data_dir=str(tmp_path), use_chat_template=False))
    examples = task.examples("train")
    verifier = task.definition.verifier.build()
    assert [verifier(e.solution, e.reference).score for e in examples] == [1.0, 1.0, 1.0]


def test_a_missing_data_folder_says_how_to_pass_one(tmp_path):
    with pytest.raises(TaskDataError, match=r"gsm8k_tool's rows are GSM8K's.*does not exist.*gsm8k_test\.jsonl"
                                            r".*task\.data_dir=<folder> in training, data_dir=<folder> in evaluation"):
        make_gsm8k_tool_rows("test", data_dir=str(tmp_path))


def test_evaluation_reads_the_rows_from_its_data_dir(tmp_path):
    """reasoning-rl-eval's data_dir= reaches the generator (load_rows hands it to a generator that takes it)."""
    from reasoning_rl.tasks.data import load_problems
    from reasoning_rl.tasks.definition import get_definition

    _write_rows(tmp_path, [NATALIA, ROUNDED])
    problems, info = load_problems(get_definition("gsm8k_tool"), "test", data_dir=tmp_path)
    assert [p.reference for p in problems] == ["72"] and str(tmp_path) in str(info)


def test_the_preset_reads_task_data_dir_and_masks_observations():
    from hydra import compose, initialize_config_module

    from reasoning_rl.cli import to_train_config
    from reasoning_rl.config_store import register_configs
    from reasoning_rl.validation import validate

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = to_train_config(compose(config_name="train", overrides=[
            "task=gsm8k_tool", "model=smollm2-135m", "task.data_dir=/data/gsm8k"]))
    validate(cfg)
    assert cfg.task.data_dir == "/data/gsm8k" and cfg.task.source_kwargs == {}
    assert (cfg.warmstart.target, cfg.warmstart.mask_observations, cfg.warmstart.learning_rate) == (
        "solution", True, 1e-4)
    assert cfg.task.episode.max_turns - 1 >= 2  # the definition's max_calls: 2 tool calls, then the answer
