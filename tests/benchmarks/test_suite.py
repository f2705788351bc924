"""Suites: the shipped files, suite=<path>, the table after each member, resume of a killed suite, the
paired comparison, and bad input (benchmarks/suite.py, suite_run.py, suite_table.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import benchmarks.generation as generation
from benchmarks.catalog import BenchmarkDataMissing, get_benchmark
from benchmarks.config import EvalConfig
from benchmarks.suite import SuiteError, list_suites, load_suite
from benchmarks.suite_run import SuiteSamplesMissing, run_suite
from reasoning_rl.config_checks import ConfigError

SUITE = """name: tiny
version: 1
description: two members, one sampled
benchmarks:
  - {benchmark: aime25, n: 2, temperature: 0.6}
  - {benchmark: svamp}
"""


def test_shipped_suites_parse_and_name_real_benchmarks() -> None:
    assert list_suites() == ["code", "grade_school", "math_reasoning", "math_reasoning_full"]
    for name in list_suites():
        suite = load_suite(name)
        assert suite.name == name
        for member in suite.members:
            get_benchmark(member.benchmark)
    members = {m.benchmark: m for m in load_suite("math_reasoning").members}
    assert list(members) == ["aime24", "aime25", "amc23", "math500", "minerva_math", "olympiadbench"]
    assert members["aime24"].n == 16 and members["aime24"].k == (1, 2, 4, 8, 16) and members["math500"].n is None


def test_member_settings_and_command_line() -> None:
    aime, math500 = load_suite("math_reasoning").members[0], load_suite("math_reasoning").members[3]
    cfg = EvalConfig(suite="math_reasoning", model_name_or_path="m", limit=5, max_new_tokens=64)
    a = aime.config(cfg)
    assert (a.benchmark, a.n, a.k, a.temperature, a.limit, a.max_new_tokens) == ("aime24", 16, [1, 2, 4, 8, 16], 0.6,
                                                                                    5, 64)
    assert (math500.config(cfg).n, math500.config(cfg).temperature) == (1, 0.0)  # greedy unless n= says otherwise


def test_unknown_suite_lists_the_known_ones() -> None:
    with pytest.raises(SuiteError, match=r"unknown suite 'math_reason'\. Did you mean 'math_reasoning'.*Known suites: "
                                         r"code, grade_school, math_reasoning, math_reasoning_full"):
        load_suite("math_reason")


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\nbenchmarks: [{benchmark: gsm8k, temprature: 0.6}]\n", r"benchmarks\[0\]: unknown key\(s\) \['temprature'\]"),
    ("name: x\nbenchmarks: [{benchmark: gsm8k, n: 2, k: [4]}]\n", r"k=\[4\] needs k <= n, but n=2"),
    ("name: x\nbenchmarks: [gsm8k, gsm8k]\n", r"\['gsm8k'\] listed twice"),
    ("name: x\n", r"missing key\(s\) \['benchmarks'\]"),
])
def test_bad_suite_file_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError, match=message):
        load_suite(str(path))


def test_benchmark_and_suite_together_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="benchmark= and suite= both given"):
        run_suite(EvalConfig(suite="grade_school", benchmark="gsm8k", samples=str(tmp_path)))
    with pytest.raises(ConfigError, match="compare= evaluates checkpoints on a suite"):
        run_suite(EvalConfig(benchmark="gsm8k", compare=["a", "b"]))


def test_missing_data_file_is_named_before_any_model_loads(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(generation, "load_engine", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(BenchmarkDataMissing, match=r"aime24: data file .*aime24\.jsonl' does not exist.*; aime25: data file .*aime25\.jsonl'"):
        run_suite(EvalConfig(suite="math_reasoning", model_name_or_path="some/model", data_dir=str(tmp_path)))


def _refs(shared_data_dir: Path, tmp_path: Path, names: list[str]) -> Path:
    refs = tmp_path / "refs"
    for name in names:
        run_suite(EvalConfig(suite=str(_suite_file(tmp_path, [name])), write_reference_samples=str(refs),
                             data_dir=str(shared_data_dir), limit=12))
    return refs


def _suite_file(tmp_path: Path, names: list[str], text: str | None = None) -> Path:
    path = tmp_path / f"suite-{'-'.join(names)}.yaml"
    path.write_text(text or "name: s\nbenchmarks: [" + ", ".join(names) + "]\n")
    return path


def test_samples_suite_table_in_four_formats(shared_data_dir: Path, tmp_path: Path) -> None:
    refs = _refs(shared_data_dir, tmp_path, ["svamp", "mawps"])
    suite = _suite_file(tmp_path, ["svamp", "mawps"])
    results = run_suite(EvalConfig(suite=str(suite), samples=str(refs / "*.reference.jsonl"), data_dir=str(shared_data_dir),
                                   limit=12, output_dir=str(tmp_path / "out"), progress=False, graders=["ours", "strict"]))
    assert [r["metrics"]["accuracy"]["value"] for r in results] == [1.0, 1.0]
    base = tmp_path / "out" / "samples--s" / "suite-s"
    data = json.loads(base.with_suffix(".json").read_text())
    assert [b["benchmark"] for b in data["benchmarks"]] == ["svamp", "mawps"]
    assert data["average"] == {"value": 1.0, "low": 1.0, "high": 1.0, "level": 0.95}
    assert "| svamp | 12 | 1 | acc | 100.0 [100.0, 100.0] | - |" in base.with_suffix(".md").read_text()
    assert base.with_suffix(".csv").read_text().splitlines()[0] == "benchmark,problems,n,metric,score % [95% CI],pass@n %"
    tex = base.with_suffix(".tex").read_text()
    assert "\\begin{tabular}{lrrrrr}" in tex and "average (2) &  &  & mean & 100.0 [100.0, 100.0] &  \\\\" in tex
    graders = json.loads((base.parent / "graders-s.json").read_text())  # graders= across the suite: one table
    assert [row[:2] for row in graders["rows"]] == [["svamp", "ours"], ["svamp", "strict"], ["mawps", "ours"],
                                                    ["mawps", "strict"]]
    # the corrupted samples of one member missing: named before anything is scored
    (refs / "mawps.corrupted.jsonl").unlink()
    with pytest.raises(SuiteSamplesMissing, match=r"benchmark mawps has no samples file .*mawps\.corrupted\.jsonl"):
        run_suite(EvalConfig(suite=str(suite), samples=str(refs / "*.corrupted.jsonl"), data_dir=str(shared_data_dir),
                             output_dir=str(tmp_path / "out")))


class Killed(Exception):
    """Stands for the process being killed mid-suite."""


def test_killed_suite_resumes_without_generating_a_sample_twice(shared_data_dir: Path, tmp_path: Path, monkeypatch,
                                                                 fake_engine) -> None:
    engines = []

    class DiesAfter(fake_engine):
        def __init__(self, calls: int | None) -> None:
            super().__init__()
            self.calls_left = calls

        def generate(self, prompts, n, sampling, seed=None):
            if self.calls_left == 0:
                raise Killed
            if self.calls_left is not None:
                self.calls_left -= 1
            return super().generate(prompts, n, sampling, seed)

    def load(*args, **kwargs):
        engines.append(DiesAfter(3 if not engines else None))
        return engines[-1], None

    monkeypatch.setattr(generation, "load_engine", load)
    cfg = EvalConfig(suite=str(_suite_file(tmp_path, ["tiny"], SUITE)), model_name_or_path="fake-model", limit=4,
                     generation_chunk=2, data_dir=str(shared_data_dir), output_dir=str(tmp_path / "out"), progress=False)
    # aime25 takes 2 calls (4 problems, chunks of 2); the third call is svamp's first chunk; the fourth dies
    with pytest.raises(Killed):
        run_suite(cfg)
    partial = json.loads((tmp_path / "out" / "fake-model" / "suite-tiny.json").read_text())
    assert (partial["finished"], partial["members"]) == (1, 2)
    assert "partial: 1 of 2 benchmarks" in partial["caption"]
    first = list(engines[0].prompts)
    assert len(first) == 6
    results = run_suite(cfg)
    second = engines[1].prompts
    assert len(second) == 2  # only svamp's last 2 problems
    assert sorted(first + second) == sorted(set(first + second))  # no prompt generated twice
    assert [r["benchmark"]["name"] for r in results] == ["aime25", "svamp"]
    assert [r["this_run"]["samples_generated"] for r in results] == [0, 2]
    assert [len(p["correct"]) for p in results[0]["problems"]] == [2, 2, 2, 2]  # n=2 for the sampled member
    final = json.loads((tmp_path / "out" / "fake-model" / "suite-tiny.json").read_text())
    assert final["finished"] == 2 and final["benchmarks"][0]["metric"] == "avg@2"
    assert final["benchmarks"][0]["pass_at_k"] == [0.0, 0.0]  # the fake answers 0, never right


def test_compare_the_first_and_last_checkpoint_of_a_run(shared_data_dir: Path, tmp_path: Path, tiny_run: Path) -> None:
    # The real path: two tiny checkpoints loaded by the hf backend, the same problems and seeds for both.
    suite = _suite_file(tmp_path, ["tiny"], SUITE)
    out = tmp_path / "out"
    results = run_suite(EvalConfig(suite=str(suite), compare=[f"run:{tiny_run}"], limit=3, max_new_tokens=4,
                                   data_dir=str(shared_data_dir), output_dir=str(out), progress=False, backend="hf",
                                   device="cpu", bootstrap=200))
    assert len(results) == 4
    [folder] = [p for p in out.iterdir() if p.name.startswith("compare-tiny")]
    data = json.loads((folder / "compare-tiny.json").read_text())
    assert [b["benchmark"] for b in data["benchmarks"]] == ["aime25", "svamp"]
    [later] = data["models"][1:]
    assert data["benchmarks"][0]["differences"][later]["problems"] == 3
    assert (folder / "compare-tiny.md").read_text().count("\n| ") >= 3
    assert (folder / "passk-tiny.png").is_file()  # aime25 has n=2: one curve per checkpoint
    shutil.rmtree(out)
