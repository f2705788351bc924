"""reasoning-rl-eval, -bench and -report on bad input: one short message on stderr naming the
problem, exit code 2, no traceback unless asked for."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasoning_rl.errors import DEBUG_ENV


def _run(cwd: Path, module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _message(out: subprocess.CompletedProcess, prog: str) -> list[str]:
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith(f"{prog}: ") and len(lines) <= 4, out.stderr
    return lines


@pytest.mark.parametrize(("args", "expected"), [
    (["benchmark=gsm8k", "model=tiny", "n=1", "k=[1,4]"],
     "invalid configuration: k=[4] needs at least k samples per problem, but n=1: raise n to 4 or drop those k"),
    (["model=tiny"], "invalid configuration: benchmark= is empty; name one (benchmark=gsm8k), several "
                     "(benchmark=[gsm8k,math500]), all, or a suite (suite=math_reasoning)"),
    (["suite=math_reason", "model=tiny"],
     "unknown suite 'math_reason'. Did you mean 'math_reasoning', 'math_reasoning_full'? Known suites: "
     "code, grade_school, math_reasoning, math_reasoning_full"),
    (["benchmark=aime25", "model=tiny", "data_dir=data"],
     "aime25: data file 'data/aime25.jsonl' does not exist; get a local file aime25.jsonl"),
    (["benchmark=stdio_code", "model=tiny", "data_dir=data"], "stdio_code: data file 'data/stdio_test.jsonl' does not exist"),
    (["benchmark=gsm8k", "model=tiny", "limt=3"], "unknown key limt (did you mean limit?)"),
    (["benchmark=gsm8k", "model=tiny", "+verifier_option.x=1"],
     "unknown key verifier_option (did you mean verifier_options?)"),
    (["benchmark=gsm8k", "model=tiny", "n=abc"],
     "bad value for n: Value 'abc' of type 'str' could not be converted to Integer"),
    (["benchmark=gsm8k", "samples=/no/such/file.jsonl"],
     "invalid configuration: samples=/no/such/file.jsonl: no such file (a JSONL of task_id and completion)"),
    (["benchmark=gsm9k", "model=tiny"], "unknown benchmark 'gsm9k'. Did you mean 'gsm8k'?"),
])
def test_eval_refuses_bad_settings_in_one_line(tmp_path, args, expected):
    out = tmp_path / "out"
    (line,) = _message(_run(tmp_path, "benchmarks.cli", *args, f"output_dir={out}"), "reasoning-rl-eval")
    assert line.startswith(f"reasoning-rl-eval: {expected}")
    assert not list(out.glob("*/*/results.json"))


def test_suite_samples_missing_a_benchmark(tmp_path, shared_data_dir):
    (line,) = _message(_run(tmp_path, "benchmarks.cli", "suite=grade_school", "samples=.", f"data_dir={shared_data_dir}"),
                       "reasoning-rl-eval")
    assert line == ("reasoning-rl-eval: samples for suite grade_school: benchmark gsm8k has no samples file "
                    "(gsm8k.jsonl does not exist); write it or drop gsm8k from a copy of the suite")


def test_eval_output_under_a_file_names_the_path(tmp_path):
    (tmp_path / "afile").write_text("")
    samples = tmp_path / "s.jsonl"
    samples.write_text("")
    (line,) = _message(_run(tmp_path, "benchmarks.cli", "benchmark=arithmetic", f"samples={samples}",
                            f"output_dir={tmp_path}/afile/out"), "reasoning-rl-eval")
    assert line.startswith(f"reasoning-rl-eval: cannot use {tmp_path}/afile/out")
    assert line.endswith("(output_dir=<folder>)")


def test_eval_debug_shows_the_traceback(tmp_path):
    out = _run(tmp_path, "benchmarks.cli", "benchmark=gsm8k", "model=tiny", "limt=3", env={DEBUG_ENV: "1"})
    assert out.returncode == 2 and "Traceback (most recent call last)" in out.stderr
    assert out.stderr.strip().splitlines()[-1] == "reasoning-rl-eval: unknown key limt (did you mean limit?)"


def test_bench_unknown_benchmark_and_unwritable_results(tmp_path):
    (line,) = _message(_run(tmp_path, "benchmarks.bench", "trian"), "reasoning-rl-bench")
    assert line.startswith("reasoning-rl-bench: unknown benchmark 'trian' (did you mean train?); choose one of: ")
    (tmp_path / "afile").write_text("")
    # Refused before the benchmark runs, not after minutes of measuring.
    (line,) = _message(_run(tmp_path, "benchmarks.bench", "math", "--results", f"{tmp_path}/afile/r.jsonl"),
                       "reasoning-rl-bench")
    assert line == (f"reasoning-rl-bench: cannot use {tmp_path}/afile: a file of that name is in the way of a folder; "
                    "choose a folder path (--results PATH, or --no-results)")


@pytest.mark.parametrize("debug", [False, True])
def test_report_of_a_missing_folder(tmp_path, debug):
    out = _run(tmp_path, "reasoning_rl.reporting.report", str(tmp_path / "nope"), *(["--debug"] if debug else []))
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == f"reasoning-rl-report: sweep folder '{tmp_path / 'nope'}' does not exist"
    assert ("Traceback" in out.stderr) == debug
