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
    import torch

    # The kernel set the figures came from: float results differ between CPU capabilities.
    assert record["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
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
    assert f["page_faults_per_step"] >= 0


_FAKE_TRL = """
import json, os, sys
out = sys.argv[sys.argv.index("--json-out") + 1]
phases = dict.fromkeys(["generate", "ref_logps", "rollout_other", "policy_fwd_loss", "backward", "optimizer",
                        "other"], 0.1)
json.dump({"results": {"sec_per_step_median": 0.5, "gen_tokens_per_sec": 100.0, "peak_rss_mb": 600.0,
                       "phase_seconds_measured": phases, "steps_run": 3, "foreign_cpu_seconds_train": 0.0},
           "model": {"params": 1}, "versions": {"tunables": os.environ.get("GLIBC_TUNABLES")},
           "trl_resolved": {"argv": sys.argv[1:]}}, open(out, "w"))
"""


@pytest.mark.parametrize("keep", [False, True])
def test_trl_runs_with_the_workload_flags_and_optionally_our_allocator_settings(tmp_path, keep, monkeypatch):
    from benchmarks.perf.train import parse_args, trl_in_subprocess
    from reasoning_rl.memory import glibc_tunables

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    script = tmp_path / "fake_trl.py"
    script.write_text(_FAKE_TRL)
    args = parse_args(["--steps", "3", "--warmup-steps", "1", "--threads", "1", "--compare", "trl",
                       "--trl-script", str(script), *(["--trl-keep-freed-memory"] if keep else [])])
    figures = trl_in_subprocess(args)
    assert figures["sec_per_step"] == 0.5 and figures["phase_sec_per_step"]["generate"] == pytest.approx(0.05)
    assert figures["versions"]["tunables"] == (glibc_tunables() if keep else None)
    argv = figures["trl_resolved"]["argv"]
    assert argv[argv.index("--steps") + 1] == "3" and argv[argv.index("--threads") + 1] == "1"


def test_train_bench_rejects_bad_flags_with_the_fix(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--steps", "3", "--warmup-steps", "3", "--no-results"])
    assert "--warmup-steps must be in [0, --steps)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--trl-keep-freed-memory", "--no-results"])
    assert "add --compare trl" in capsys.readouterr().err


@pytest.mark.parametrize("flag, setting", [("auto", None), ("true", True), ("false", False)])
def test_keep_freed_memory_reaches_our_trainer_in_process_and_in_the_compared_subprocess(tmp_path, flag, setting,
                                                                                         monkeypatch):
    import json

    import benchmarks.perf.train as bench
    from benchmarks.perf.results import RESULT_PREFIX

    args = bench.parse_args(["--keep-freed-memory", flag, "--compare", "trl"])
    assert bench.train_config(args, tmp_path / "model", tmp_path / "def.yaml", tmp_path / "run").trainer.keep_freed_memory is setting
    seen = []
    monkeypatch.setattr(bench, "_child", lambda cmd, what, env=None: seen.append(cmd) or
                        RESULT_PREFIX + json.dumps({"figures": {"sec_per_step": 1.0}}))
    assert bench.ours_in_subprocess(args) == {"sec_per_step": 1.0}
    assert seen[0][seen[0].index("--keep-freed-memory") + 1] == flag
