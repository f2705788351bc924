"""The benchmark catalog: the evaluation-only definitions, their reference extraction on
hand-written rows, and what happens when a benchmark's data is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.catalog import (
    BenchmarkDataMissing,
    UnknownBenchmarkError,
    available,
    get_benchmark,
    list_benchmarks,
    missing_data,
    require_data,
)
from benchmarks.config import EvalConfig
from benchmarks.runner import run
from reasoning_rl.tasks.data import load_problems, make_problem
from rewards.math import MathVerifier

NEW = ["aime25", "amc23", "minerva_math", "olympiadbench", "college_math", "svamp", "asdiv", "mawps"]
SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."

# (benchmark, a row as the dataset writes it, the prompt's question, the reference, a right answer, a wrong one)
ROWS: list[tuple[str, dict[str, Any], str, Any, str, str]] = [
    ("aime25", {"problem": "Find x.", "answer": "070"}, "Find x.", "70", "70", "71"),
    ("amc23", {"id": 3, "problem": "How far?", "answer": 27.0}, "How far?", 27.0, "27", "28"),
    ("minerva_math", {"idx": 0, "problem": "Size?", "type": "Astronomy",
                      "solution": "$s=\\alpha f=\\boxed{1.6} \\mathrm{~cm}$"}, "Size?", "1.6", "1.6", "16"),
    ("olympiadbench", {"id": 7, "question": "Find all n.", "final_answer": ["$2$", "$-3$"], "subfield": "Algebra",
                       "solution": ["..."]}, "Find all n.", ["$2$", "$-3$"], "-3, 2", "2"),
    ("college_math", {"question": "Simplify: $-10-4(n-5)$", "answer": "$10-4 n$", "data_topic": "algebra"},
     "Simplify: $-10-4(n-5)$", "$10-4 n$", "10 - 4n", "10 + 4n"),
    ("svamp", {"ID": "chal-1", "Body": "There are 290 bananas in 2 groups.", "Question": "How big is each group?",
               "Answer": 145.0, "Type": "Common-Division", "Equation": "( 290.0 / 2.0 )"},
     "There are 290 bananas in 2 groups. How big is each group?", 145.0, "145", "146"),
    ("asdiv", {"idx": 0, "body": "Seven red apples and two green apples.", "question": "How many apples?",
               "answer": "9 (apples)", "solution_type": "Addition", "formula": "7+2=9"},
     "Seven red apples and two green apples. How many apples?", "9 (apples)", "9", "10"),
    ("mawps", {"idx": 0, "input": "Joan had 70 shells and has 27 left. How many did she give?", "target": 43.0,
               "type": "singleeq"}, "Joan had 70 shells and has 27 left. How many did she give?", 43.0, "43", "42"),
]


def test_every_new_benchmark_is_listed() -> None:
    assert set(NEW) <= set(list_benchmarks())
    assert {"gsm8k", "math500", "aime24", "humaneval"} <= set(list_benchmarks())


@pytest.mark.parametrize(("name", "row", "question", "reference", "right", "wrong"), ROWS, ids=[r[0] for r in ROWS])
def test_hand_written_row(name: str, row: dict[str, Any], question: str, reference: Any, right: str,
                          wrong: str) -> None:
    problem = make_problem(get_benchmark(name), row, 0)
    assert problem.prompt == question + SUFFIX
    assert problem.reference == reference
    verify = MathVerifier()
    assert verify(f"... so $\\boxed{{{right}}}$", problem.reference, **problem.fields).score == 1.0
    assert verify(f"... so $\\boxed{{{wrong}}}$", problem.reference, **problem.fields).score == 0.0


def test_unknown_benchmark_suggests_and_lists() -> None:
    with pytest.raises(UnknownBenchmarkError, match=r"Did you mean 'aime25'.*Known benchmarks: .*mawps"):
        get_benchmark("aime2025")


def test_missing_file_is_named_with_where_to_get_it(tmp_path: Path) -> None:
    reason = missing_data(get_benchmark("aime25"), str(tmp_path))
    assert str(tmp_path / "aime25.jsonl") in reason and "does not exist" in reason and "docs/evaluation.md" in reason
    with pytest.raises(BenchmarkDataMissing, match=r"aime25\.jsonl"):
        require_data([get_benchmark("aime25")], str(tmp_path))


def test_local_only_benchmark_without_data_dir() -> None:
    assert "pass data_dir=" in missing_data(get_benchmark("aime25"), None)
    assert missing_data(get_benchmark("gsm8k"), None) is None  # the hub can provide it
    assert missing_data(get_benchmark("arithmetic"), None) is None  # generated


def test_available_skips_what_the_folder_lacks(shared_data_dir: Path) -> None:
    specs = [get_benchmark(n) for n in list_benchmarks()]
    keep, skipped = available(specs, str(shared_data_dir))
    assert {s.name for s in keep} >= set(NEW) | {"gsm8k", "math500", "humaneval", "arithmetic"}
    assert "stdio_code" in skipped and "stdio_test.jsonl" in skipped["stdio_code"]


def test_benchmark_all_skips_what_data_dir_cannot_provide(shared_data_dir: Path, tmp_path: Path, capsys) -> None:
    # docs/evaluation.md: reasoning-rl-eval benchmark=all write_reference_samples=refs data_dir=../shared/data
    run(EvalConfig(benchmark="all", write_reference_samples=str(tmp_path / "refs"), data_dir=str(shared_data_dir),
                   limit=2))
    err = capsys.readouterr().err
    assert "benchmark=all: skipping stdio_code: stdio_code: data file" in err and "stdio_test.jsonl" in err
    written = {p.name.split(".")[0] for p in (tmp_path / "refs").iterdir()}
    assert set(NEW) | {"gsm8k", "math500", "humaneval", "mbpp"} <= written
    assert "stdio_code" not in written
    with pytest.raises(BenchmarkDataMissing, match=r"stdio_test\.jsonl' does not exist"):
        run(EvalConfig(benchmark="stdio_code", write_reference_samples=str(tmp_path / "refs"),
                       data_dir=str(shared_data_dir)))


def test_the_grade_school_transfer_sets_share_no_problem_with_gsm8k_train(shared_data_dir: Path) -> None:
    """SVAMP, ASDiv and MAWPS measure transfer from GSM8K training (docs/real_model.md): no problem
    of theirs is a GSM8K train problem (prompts compared lower-cased, whitespace collapsed)."""
    def normal(prompt: str) -> str:
        return " ".join(prompt.lower().split())

    train = {normal(p.prompt) for p in load_problems(get_benchmark("gsm8k"), "train", data_dir=shared_data_dir)[0]}
    for name in ("svamp", "asdiv", "mawps"):
        problems = load_problems(get_benchmark(name), data_dir=shared_data_dir)[0]
        assert problems and not {normal(p.prompt) for p in problems} & train, name


@pytest.mark.parametrize("name", ["svamp_direct", "gsm8k_direct"])
def test_direct_variants_ask_the_same_problems_for_the_number_alone(name: str, shared_data_dir: Path) -> None:
    """The MAWPS recipe's transfer sets (docs/real_model.md): the step-by-step benchmark's problems and
    references, with the prompt the recipe trains on."""
    direct, _ = load_problems(get_benchmark(name), data_dir=shared_data_dir, limit=5)
    step_by_step, _ = load_problems(get_benchmark(name.removesuffix("_direct")), data_dir=shared_data_dir, limit=5)
    assert len(direct) == 5
    for d, s in zip(direct, step_by_step):
        assert d.prompt == s.prompt.removesuffix(SUFFIX) + "\nAnswer with only the final number."
        assert d.reference == s.reference
