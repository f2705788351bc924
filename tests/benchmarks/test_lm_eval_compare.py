"""The lm-eval side-by-side's bookkeeping on hand-written records (the real run is
`reasoning-rl-bench eval --compare lm-eval`, minutes on a CPU: docs/evaluation.md)."""

from __future__ import annotations

import importlib.util
import json
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


def test_several_backends_are_timed_beside_one_lm_eval_run(tmp_path, monkeypatch) -> None:
    """The orchestration only (each command's outputs written by hand): one lm-eval run, our side once per
    backend, the vllm side under ``--vllm-python``, each backend's speed-up against the one lm-eval wall time."""
    from benchmarks.perf import lm_eval_compare as bench

    text = " 2 + 2 = 4.\n#### 4"
    calls: list[list[str]] = []

    def fake_timed(cmd, log, loads):
        calls.append(cmd)
        loads += [(0.5, 0.5, 0.5), (0.7, 0.7, 0.7)]
        if "lm_eval" in cmd:
            out = Path(cmd[cmd.index("--output_path") + 1]) / "model"
            out.mkdir(parents=True)
            (out / "samples_gsm8k_local_1.jsonl").write_text("".join(
                json.dumps(_rec(0, text, "4", 1.0, name)) + "\n" for name in ("strict-match", "flexible-extract")))
            return 20.0
        folder = Path(next(a for a in cmd if a.startswith("output_dir=")).split("=", 1)[1]) / "m" / "gsm8k_lm_eval"
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(
            {"problems": [{"task_id": "gsm8k_lm_eval/0", "reference": "4", "correct": [True]}]}))
        (folder / "problems.jsonl").write_text(json.dumps({"task_id": "gsm8k_lm_eval/0", "completions": [text]}) + "\n")
        return {"backend=native": 10.0, "backend=vllm": 5.0}[next(a for a in cmd if a.startswith("backend="))]

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setattr(bench, "_timed", fake_timed)
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name, *a: object())
    result = bench.run(["--model", str(model), "--limit", "1", "--backend", "native", "vllm",
                        "--vllm-python", "/venv/bin/python", "--out", str(tmp_path / "out")])
    assert sum("lm_eval" in c for c in calls) == 1 and calls[-1][2] == "lm_eval"
    assert calls[1][0] == "/venv/bin/python" and calls[0][0] != "/venv/bin/python"
    assert result.figures["speedup"] == {"native": 2.0, "vllm": 4.0}
    assert result.figures["identical_completions"] == {"native": 1, "vllm": 1}
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert set(report["ours"]) == {"native", "vllm"} and report["wall_s"]["lm_eval"] == 20.0
