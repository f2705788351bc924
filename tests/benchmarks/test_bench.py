"""reasoning-rl-bench: the results file, the dispatcher and a 2-step `train` run (no TRL needed)."""

import json
import threading

import pytest

from benchmarks.bench import main
from benchmarks.perf.results import RESULT_PREFIX, BenchResult, append_record, read_records, run_and_record


def test_records_append_as_whole_lines_from_many_threads(tmp_path):
    path = tmp_path / "r.jsonl"
    threads = [threading.Thread(target=append_record, args=(path, {"bench": "x", "i": i, "pad": "y" * 5000}))
               for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = read_records(path)
    assert sorted(r["i"] for r in records) == list(range(16))


def test_run_and_record_appends_and_prints_the_record_last(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    code = run_and_record("demo", lambda argv: BenchResult(0, {"argv": argv}, {"speed": 2.0}),
                          ["--results", str(path), "--flag"])
    assert code == 0
    (record,) = read_records(path, bench="demo")
    assert record["figures"] == {"speed": 2.0} and record["args"] == {"argv": ["--flag"]}
    assert {"commit", "dirty", "date", "machine"} <= set(record)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(RESULT_PREFIX) and json.loads(last[len(RESULT_PREFIX):])["figures"] == {"speed": 2.0}


def test_unknown_benchmark_lists_the_known_ones(capsys):
    assert main(["trian"]) == 2
    assert "choose one of: train, math, code" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["native", "hf"])
def test_train_bench_runs_our_trainer_for_two_steps(tmp_path, backend):
    path = tmp_path / "r.jsonl"
    assert main(["train", "--steps", "2", "--warmup-steps", "1", "--hidden", "32", "--layers", "1",
                 "--max-new", "4", "--threads", "1", "--backend", backend, "--results", str(path)]) == 0
    (record,) = read_records(path, bench="train")
    f = record["figures"]
    assert f["sec_per_step"] > 0 and f["gen_tokens_per_sec"] > 0 and f["peak_rss_mb"] > 0
    assert set(f["phase_sec_per_step"]) == {"generate", "reward", "frozen_logprobs", "policy", "optimizer", "other"}
    assert 32 <= f["completion_tokens_per_step"] <= 4 * 32  # 4 prompts x G 8, 1..4 tokens each


def test_train_bench_rejects_bad_flags_with_the_fix(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--steps", "3", "--warmup-steps", "3", "--no-results"])
    assert "--warmup-steps must be in [0, --steps)" in capsys.readouterr().err
