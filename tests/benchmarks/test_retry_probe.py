"""benchmarks.retry_probe: every checkpoint retries the same failed first attempts, rebuilt by code_feedback
from the recorded episodes; a wrong option or a missing file is said in one line."""

from __future__ import annotations

import json

import pytest

from benchmarks.retry_probe import failures, main
from reasoning_rl.envs import get_environment
from reasoning_rl.settings.task import TaskConfig
from reasoning_rl.tasks import Task

OPTIONS = {"retry_prompt": "last_line"}


def _episodes(tmp_path, n_failed=2):
    """problems.jsonl as reasoning-rl-eval writes it: two failed first attempts (then a retry), one pass."""
    task = Task(TaskConfig(name="code_synthetic_feedback", max_eval_examples=None))
    examples = task.examples(task.eval_split)[:n_failed + 1]
    rows = []
    for k, ex in enumerate(examples):
        if k < n_failed:
            env = get_environment("code_feedback", **OPTIONS)
            env.reset(ex)
            text = "x + 999\n" + env.step("x + 999\n").observation + "x\n"
            episode = {"turns": 2, "text": text}
        else:
            episode = {"turns": 1, "text": ex.reference + "\n"}
        rows.append({"task_id": ex.id, "episodes": [episode], "verdicts": [{"score": 0.0}]})
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, examples


def test_the_failed_attempts_are_rebuilt_with_their_feedback(tmp_path):
    path, examples = _episodes(tmp_path)
    cases = failures(path, "code_synthetic_feedback", OPTIONS)
    assert [c.example.id for c in cases] == [e.id for e in examples[:2]]  # the passed one has no retry
    for case in cases:
        assert case.attempt == "x + 999\n"
        assert case.context.startswith(case.example.prompt + "x + 999\n# 0 of ")
        assert case.context.endswith("    return ")  # retry_prompt=last_line: the stub's open line again
        assert len(case.env.reports) == 1  # the first attempt was run in the sandbox


def test_each_checkpoint_retries_every_failure(tmp_path, tiny_run, capsys):
    path, _ = _episodes(tmp_path)
    out = tmp_path / "probe.json"
    checkpoints = [str(tiny_run / "checkpoint-5"), str(tiny_run / "checkpoint-10")]
    assert main([*checkpoints, "--episodes", str(path), "--option", "retry_prompt=last_line",
                 "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert [r["checkpoint"] for r in results] == checkpoints
    assert all(r["failures"] == 2 and 0 <= r["fixed"] <= 2 and 0 <= r["repeated"] <= 2 for r in results)
    assert "2 failed first attempts" in capsys.readouterr().out


def test_a_wrong_option_and_a_missing_file_are_said_in_one_line(tmp_path, capsys):
    path, _ = _episodes(tmp_path, n_failed=1)
    with pytest.raises(SystemExit, match="the rebuilt feedback differs from the recorded episode's"):
        failures(path, "code_synthetic_feedback", {**OPTIONS, "max_failures": 2})
    assert main(["m", "--episodes", str(tmp_path / "absent.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().out
