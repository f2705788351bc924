"""Bad data: a training file with a row that lacks a field the task needs is refused in one line naming
the file, the row and the field, exit code 2, status.json failed before any step (so the corrected
command may use the folder)."""

import json

from tests.reasoning_rl.faults.conftest import refusal, train


def test_a_row_without_its_answer_is_named_in_one_line(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"id": "a", "question": "1+1?", "answer": "2"}\n{"id": "b", "question": "2+2?"}\n')
    run = tmp_path / "run"
    line = refusal(train(tmp_path, f"+task.data_files.train={data}", f"trainer.output_dir={run}"))
    assert line.startswith(f"arithmetic row 1 (id 'b') of {data}: missing field 'answer'"), line
    status = json.loads((run / "status.json").read_text())
    assert (status["status"], status["stage"]) == ("failed", "setup")
    assert not (run / "metrics.jsonl").exists()
