"""Samples mode on every benchmark: its own reference solutions score 100%, corrupted ones 0%."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.catalog import get_benchmark
from benchmarks.config import EvalConfig
from benchmarks.evaluate import ScoringSettings, evaluate, read_samples
from benchmarks.runner import CodeExecutionNotAllowed, run
from benchmarks.samples import corrupt_answer, write_reference_samples
from reasoning_rl.tasks.data import load_problems

MATH_BENCHMARKS = ["math500", "gsm8k", "aime24", "arithmetic", "math", "aime25", "amc23", "minerva_math",
                   "olympiadbench", "college_math", "svamp", "asdiv", "mawps"]
CODE_BENCHMARKS = ["humaneval", "mbpp", "mbpp_sanitized"]
# The full sets are checked by the CLI runs recorded in docs/evaluation.md (all 100% / 0%);
# here the larger ones are cut to their first problems to keep the suite near a minute on 2 cores
# (this also leaves out MBPP task 123, whose reference solution alone runs 7-14 s).
LIMITS = {"math": 300, "math500": 200, "humaneval": 80, "mbpp": 100, "mbpp_sanitized": 60, "minerva_math": 100,
          "olympiadbench": 150, "college_math": 200, "svamp": 200, "asdiv": 300, "mawps": 200}


def wrong_ids(results: dict, expected: bool) -> list[str]:
    return [p["task_id"] for p in results["problems"] if any(c != expected for c in p["correct"])]


@pytest.mark.parametrize("name", MATH_BENCHMARKS + CODE_BENCHMARKS)
def test_reference_samples_score_100_and_corrupted_0(name: str, shared_data_dir: Path, tmp_path: Path, inline_pool,
                                                     has_math_verifier, has_code_verifier, exact_match) -> None:
    spec = get_benchmark(name)
    if spec.requires_code_execution and not has_code_verifier:
        pytest.skip("rewards.code (the code verifier) cannot be imported yet")
    limit = LIMITS.get(name)
    problems, _ = load_problems(spec, data_dir=shared_data_dir, limit=limit)
    reference, corrupted = write_reference_samples(spec, problems, tmp_path / "refs")
    for path, expected in ((reference, True), (corrupted, False)):
        if spec.verifier.name == "math" and not has_math_verifier:
            # Stand-in until rewards.math lands: same loop, exact-match verifier, in-process.
            scoring = ScoringSettings(verifier=exact_match, key_data={"stand-in": 1}, pool=inline_pool)
            results = evaluate(spec, problems, read_samples(path, problems), scoring, tmp_path / path.stem,
                               show_progress=False)
        else:
            [results] = run(EvalConfig(benchmark=name, samples=str(path), data_dir=str(shared_data_dir), limit=limit,
                                       allow_code_execution=True, output_dir=str(tmp_path / "out"), progress=False))
        counts = results["metrics"]["counts"]
        assert counts["problems"] == len(problems)
        assert wrong_ids(results, expected) == [], f"{path.name}: {counts}"
        assert results["metrics"]["accuracy"]["value"] == (1.0 if expected else 0.0)
        for field, groups in results["metrics"].get("breakdown", {}).items():
            assert sum(g["num_problems"] for g in groups.values()) == len(problems), field
            assert {g["value"] for g in groups.values()} == {1.0 if expected else 0.0}
    if name == "math500":
        assert sorted(results["metrics"]["breakdown"]["level"]) == ["1", "2", "3", "4", "5"]


@pytest.mark.parametrize(("answer", "wrong"), [("18", "19"), ("025", "26"), ("-3", "-2"), ("0.5", "1.5"),
                                               ("\\frac{1}{2}", "(\\frac{1}{2})^2+1"),
                                               ("2^{2005}", "(2^{2005})^2+1"), ("12345678", "(12345678)^2+1"),
                                               (27.0, "28.0"), (["$2$", "$-3$"], "(2, -3)^2+1")])
def test_corrupt_answer(answer: object, wrong: str) -> None:
    assert corrupt_answer(answer) == wrong


@pytest.mark.parametrize("name", CODE_BENCHMARKS)
def test_code_benchmarks_need_the_explicit_opt_in(name: str, tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"task_id": "x", "completion": "import os"}\n')
    with pytest.raises(CodeExecutionNotAllowed, match="allow_code_execution=true"):
        run(EvalConfig(benchmark=name, samples=str(samples), output_dir=str(tmp_path)))


def test_samples_file_for_another_benchmark_is_refused(shared_data_dir: Path, tmp_path: Path) -> None:
    spec = get_benchmark("aime24")
    problems, _ = load_problems(spec, data_dir=shared_data_dir)
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"task_id": "gsm8k/0", "completion": "1"}\n')
    with pytest.raises(ValueError, match=r"none of its 1 task_ids \(e.g. \['gsm8k/0'\]\) is a problem of this benchmark"):
        read_samples(samples, problems)
