"""A samples file that cannot be scored is one UserError naming the file, the line and what is wrong."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.config import EvalConfig
from benchmarks.runner import run
from benchmarks.sources import SamplesFileError, SamplesFileNotFound, read_samples
from reasoning_rl.errors import UserError
from reasoning_rl.tasks.data import load_problems
from reasoning_rl.tasks.definition import get_definition

ARITHMETIC = get_definition("arithmetic")
PROBLEMS, _ = load_problems(ARITHMETIC, limit=3)
A, B, C = (p.task_id for p in PROBLEMS)


def line(task_id: str, completion: str = "1") -> str:
    return f'{{"task_id": "{task_id}", "completion": "{completion}"}}'


@pytest.mark.parametrize(("lines", "message"), [
    ([line(A), '{"task_id": "x", "completion": ', line(C)],
     r"s\.jsonl:2: not valid JSON \(Expecting value at column \d+\): '\{\"task_id\": \"x\", \"completion\":'"),
    ([line(A), f'{{"task_id": "{B}", "text": "2"}}'],
     rf"s\.jsonl:2: sample '{re.escape(B)}' has no 'completion' \(or a completions list\); its fields are \['task_id', 'text'\]"),
    (['{"completion": "2"}'],
     r"s\.jsonl:1: the sample has no 'task_id'; its fields are \['completion'\]"),
    ([line(A), '{}'], r"s\.jsonl:2: the sample has no 'task_id' and no 'completion' .*its fields are none"),
    ([f'["{A}", "1"]'], r"s\.jsonl:1: a sample is a JSON object with 'task_id' and 'completion', this line holds a "
                        r"JSON list"),
    ([f'{{"task_id": "{A}", "completions": "1"}}'], r"s\.jsonl:1: 'completions' of sample .* must be a non-empty list"),
    ([f'{{"task_id": "{A}", "completion": 7}}'], r"s\.jsonl:1: 'completion' of sample .* must be a string, got a int"),
    ([line(A), line(C)], rf"s\.jsonl: covers only 2 of the 3 problems: no sample for 1 \(e.g. \['{re.escape(B)}'\]\)"),
    ([], r"s\.jsonl: holds no samples"),
])
def test_bad_samples_file_is_named_with_line_and_problem(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(f"{x}\n" for x in lines))
    with pytest.raises(SamplesFileError, match=message) as err:
        read_samples(path, PROBLEMS)
    assert isinstance(err.value, UserError) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_samples_file(tmp_path: Path) -> None:
    with pytest.raises(SamplesFileNotFound, match=r"samples file '.*nope\.jsonl' does not exist"):
        read_samples(tmp_path / "nope.jsonl", PROBLEMS)


def test_good_file_with_several_completions_per_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(f'{{"task_id": "{A}", "completions": ["1", "2"]}}\n{line(B)}\n{line(C)}\n{line(A, "3")}\n')
    source = read_samples(path, PROBLEMS)
    assert source.by_task[A] == ["1", "2", "3"] and source.by_task[B] == ["1"]


def test_damaged_results_cache_says_what_to_do(tmp_path: Path) -> None:
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(f"{line(p.task_id, p.reference)}\n" for p in PROBLEMS))
    cfg = EvalConfig(benchmark="arithmetic", samples=str(samples), limit=3, output_dir=str(tmp_path / "out"),
                     progress=False, score_workers=1)
    [first] = run(cfg)
    assert first["metrics"]["accuracy"]["value"] == 1.0
    [cache] = (tmp_path / "out").glob("*/arithmetic/problems.jsonl")
    cache.write_text(cache.read_text()[:-20])  # cut mid-line
    with pytest.raises(UserError, match=rf"the results cache {cache} is damaged .*overwrite=true"):
        run(cfg)


def test_eval_command_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(f"{line(A)}\n{{broken\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from benchmarks.cli import eval_main; eval_main()", "benchmark=arithmetic",
         f"samples={path}", "limit=3", "progress=false", f"output_dir={tmp_path / 'out'}",
         f"hydra.run.dir={tmp_path / 'hydra'}"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [f"reasoning-rl-eval: {path}:2: not valid JSON "
                                                 "(Expecting property name enclosed in double quotes at column 2): "
                                                 "'{broken'"]
