"""The lm-eval side-by-side's bookkeeping on hand-written records (the real run is
`reasoning-rl-bench eval --compare lm-eval`, minutes on a CPU: docs/evaluation.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from benchmarks.bench import main
from benchmarks.perf.lm_eval_compare import compare, lm_eval_task


def _rec(doc_id: int, text: str, filtered: str, exact: float, name: str) -> dict:
    return {"doc_id": doc_id, "filter": name, "resps": [[text]], "filtered_resps": [filtered], "exact_match": exact}


def test_compare_lists_grader_disagreements_on_the_same_completion() -> None:
    ours = {"problems": [{"task_id": "gsm8k_lm_eval/0", "reference": "18", "correct": [True]},
                         {"task_id": "gsm8k_lm_eval/1", "reference": "3", "correct": [False]},
                         {"task_id": "gsm8k_lm_eval/2", "reference": "70000", "correct": [True]}]}
    texts = [" 16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\n#### 18",  # both graders right
             " She needs 2 bolts.",                           # both wrong
             " The profit is $70,000 so the answer is 70000 dollars."]  # no ####: strict misses, ours and flexible see 70000
    theirs = {"strict-match": {0: _rec(0, texts[0], "18", 1.0, "strict-match"),
                               1: _rec(1, texts[1], "[invalid]", 0.0, "strict-match"),
                               2: _rec(2, texts[2], "[invalid]", 0.0, "strict-match")},
              "flexible-extract": {0: _rec(0, texts[0], "18", 1.0, "flexible-extract"),
                                   1: _rec(1, texts[1], "2", 0.0, "flexible-extract"),
                                   2: _rec(2, texts[2], "70000", 1.0, "flexible-extract")}}
    report = compare(ours, [texts[0], texts[1], "something else"], theirs, limit=3)
    acc = {k: round(v["value"], 4) for k, v in report["accuracy"].items()}
    assert acc == {"ours (our completions, our verifier)": 0.6667, "lm-eval strict-match": 0.3333,
                   "lm-eval flexible-extract": 0.6667, "our verifier on lm-eval's completions": 0.6667}
    assert report["identical_completions"] == 2
    [d] = report["disagreements"]  # problem 2 under strict-match only
    assert (d["doc_id"], d["filter"], d["ours"], d["lm_eval"]["correct"]) == (
        2, "strict-match", {"correct": True, "extracted": "70000 dollars"}, False)


def test_task_file_keeps_lm_evals_format_with_local_rows(tmp_path: Path) -> None:
    task = lm_eval_task(tmp_path)
    assert task["doc_to_text"] == "Question: {{question}}\nAnswer:" and task["num_fewshot"] == 5
    assert task["fewshot_config"] == {"sampler": "first_n"}
    assert task["dataset_kwargs"]["data_files"]["test"] == str(tmp_path / "gsm8k_test.jsonl")
    assert [f["name"] for f in task["filter_list"]] == ["strict-match", "flexible-extract"]


@pytest.mark.skipif(importlib.util.find_spec("lm_eval") is not None, reason="lm_eval is installed")
def test_without_lm_eval_the_bench_stops_first_with_the_install(tmp_path, monkeypatch, capsys) -> None:
    """No run of our side first (minutes): one line naming the extra, exit code 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--compare", "lm-eval", "--limit", "2", "--no-results"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("reasoning-rl-bench: --compare lm-eval needs lm-evaluation-harness") and ".[bench]" in err[-1]
    assert not list(tmp_path.iterdir())
