"""scripts/completion_stats.py on a hand-written evaluation folder (a whitespace tokenizer stands in)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import load_script

completion_stats = load_script("completion_stats")


def test_rows_count_answers_truncation_and_lengths(tmp_path: Path) -> None:
    folder = tmp_path / "model" / "svamp"
    folder.mkdir(parents=True)
    problems = [{"task_id": "svamp/0", "correct": [True, False], "answers": ["3", None]},
                {"task_id": "svamp/1", "correct": [False, False], "answers": ["7", "8"]}]
    (folder / "results.json").write_text(json.dumps({"benchmark": {"name": "svamp"}, "problems": problems}))
    cache = [{"task_id": "svamp/0", "completions": ["a b c", "a b c d e f"]},
             {"task_id": "svamp/1", "completions": ["a", "a b c d e f"]},
             {"task_id": "svamp/9", "completions": ["not evaluated in this result"]}]
    (folder / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cache))

    def tokenizer(text, add_special_tokens=False):
        return {"input_ids": text.split()}

    [row] = completion_stats.rows(tmp_path / "model", tokenizer, max_new_tokens=6)
    assert row == {"benchmark": "svamp", "problems": 2, "samples": 4, "accuracy": 0.25, "no_answer": 0.25,
                   "truncated": 0.5, "mean_tokens": 4.0, "median_tokens": 4.5}
