"""Grader sensitivity (``graders=``): the same completions under several graders, on hand-made samples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks.config import EvalConfig
from benchmarks.graders import GraderError, build_graders
from benchmarks.runner import run
from reasoning_rl.tasks.definition import get_definition

# The first three MATH-500 problems and their reference answers.
IDS = ["test/precalculus/807.json", "test/intermediate_algebra/1994.json", "test/algebra/2584.json"]


def write_samples(path: Path, completions: list[str]) -> Path:
    path.write_text("".join(json.dumps({"task_id": t, "completion": c}) + "\n" for t, c in zip(IDS, completions)))
    return path


def evaluate_with(graders: list[str], samples: Path, data: Path, out: Path) -> dict:
    [result] = run(EvalConfig(benchmark="math500", samples=str(samples), data_dir=str(data), limit=3,
                              graders=graders, output_dir=str(out), progress=False))
    return result


def test_strict_extraction_disagrees_only_on_the_unmarked_answer(shared_data_dir: Path, tmp_path: Path,
                                                                  has_math_verifier: bool, capsys) -> None:
    if not has_math_verifier:
        pytest.skip("rewards.math is not importable")
    samples = write_samples(tmp_path / "s.jsonl", [
        "So the point is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$.",  # boxed, right: both graders pass
        "Adding the two sums gives $p - q$",  # right but unmarked: the fallback finds it, strict does not
        "Hence $\\boxed{5}$.",  # boxed, wrong (reference 14/3): both fail
    ])
    r = evaluate_with(["ours", "strict"], samples, shared_data_dir, tmp_path / "out")
    report = r["grader_sensitivity"]
    # ours: 2 of 3 problems right; strict: 1 of 3.
    assert report["accuracy"]["ours"]["value"] == pytest.approx(2 / 3)
    assert report["accuracy"]["strict"]["value"] == pytest.approx(1 / 3)
    assert report["accuracy"]["ours"] == r["metrics"]["accuracy"]  # ours is the evaluation's own verdict
    assert report["disagree_problems"] == 1 and report["disagree_samples"] == 1
    assert report["vs_ours"]["strict"] == {"ours_pass_theirs_fail": 1, "ours_fail_theirs_pass": 0,
                                           "disagree_rate": pytest.approx(1 / 3)}
    assert report["graders"]["strict"] == {"verifier": "math", "options": {"strict": True}}
    [example] = report["examples"]
    assert example["task_id"] == IDS[1] and example["sample"] == 0
    assert example["verdicts"]["ours"]["correct"] and example["verdicts"]["ours"]["answer"] == "p - q"
    assert not example["verdicts"]["strict"]["correct"] and example["verdicts"]["strict"]["answer"] is None
    printed = capsys.readouterr().out
    assert "graders on math500: 1 problems (1 samples) where the graders disagree" in printed
    assert f"e.g. {IDS[1]} sample 0" in printed
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "## Grader sensitivity" in summary
    assert "| math500 | strict | math (strict=True) | 33.33 ± 33.33 | 1 | 0 | 1 |" in summary
    saved = json.loads(next((tmp_path / "out").glob("**/results.json")).read_text())
    assert saved["grader_sensitivity"]["disagree_problems"] == 1


def test_no_graders_no_report(shared_data_dir: Path, tmp_path: Path, has_math_verifier: bool) -> None:
    if not has_math_verifier:
        pytest.skip("rewards.math is not importable")
    samples = write_samples(tmp_path / "s.jsonl", ["$\\boxed{1}$"] * 3)
    r = evaluate_with([], samples, shared_data_dir, tmp_path / "out")
    assert "grader_sensitivity" not in r
    assert "Grader sensitivity" not in (tmp_path / "out" / "summary.md").read_text()


def test_ours_comes_first_and_repeats_are_dropped() -> None:
    graders = build_graders(["strict", "ours", "strict", "math"], get_definition("math500"), {})
    assert [g.name for g in graders] == ["ours", "strict", "math"]
    assert [dict(g.options) for g in graders] == [{}, {"strict": True}, {}]


def test_unknown_grader_names_the_close_match() -> None:
    with pytest.raises(GraderError, match=r"'mathh' is neither 'ours', 'strict' nor a verifier.*Did you mean 'math'"):
        build_graders(["mathh"], get_definition("math500"), {})


def test_strict_on_a_verifier_without_that_option_names_the_benchmark() -> None:
    with pytest.raises(GraderError, match="'strict' cannot be built for benchmark humaneval"):
        build_graders(["strict"], get_definition("humaneval"), {})


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify is installed")
def test_math_verify_missing_says_how_to_install(shared_data_dir: Path, tmp_path: Path) -> None:
    samples = write_samples(tmp_path / "s.jsonl", ["$\\boxed{1}$"] * 3)
    with pytest.raises(GraderError, match=r"'math_verify' cannot be built.*pip install"):
        evaluate_with(["ours", "math-verify"], samples, shared_data_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before anything was scored or written


def test_a_results_cache_is_regraded_as_a_samples_file(shared_data_dir: Path, tmp_path: Path,
                                                        has_math_verifier: bool) -> None:
    """An evaluation's problems.jsonl (task_id + completions) re-grades without generating again."""
    if not has_math_verifier:
        pytest.skip("rewards.math is not importable")
    samples = write_samples(tmp_path / "s.jsonl", ["$\\boxed{1}$", "It is $p - q$", "$\\boxed{\\frac{14}{3}}$"])
    first = evaluate_with([], samples, shared_data_dir, tmp_path / "out")
    cache = next((tmp_path / "out").glob("**/problems.jsonl"))
    again = evaluate_with(["ours", "strict"], cache, shared_data_dir, tmp_path / "out2")
    assert again["metrics"]["accuracy"] == first["metrics"]["accuracy"]  # 2 of 3
    assert again["grader_sensitivity"]["vs_ours"]["strict"]["ours_pass_theirs_fail"] == 1  # "It is $p - q$"
