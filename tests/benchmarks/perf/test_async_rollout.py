"""``reasoning-rl-bench async``: both sides train in fresh processes into ``--workdir``, as the user named it."""

from __future__ import annotations

import json

import pytest

from benchmarks.bench import main
from benchmarks.perf.results import RESULT_PREFIX
from tests.reasoning_rl.conftest import TINY_OVERRIDES


@pytest.mark.slow  # two short training runs in fresh processes, one with its generator process
def test_a_relative_workdir_is_the_callers(tmp_path, monkeypatch, capsys):
    """`--workdir runs` is `./runs` where the benchmark was started: both runs write there, and it reads them."""
    monkeypatch.chdir(tmp_path)
    code = main(["async", "--no-results", "--steps", "2", "--rounds", "1", "--no-warm-start", "--workdir", "runs",
                 "--extra", *TINY_OVERRIDES])
    out = capsys.readouterr().out
    assert code == 0
    for k in (0, 1):
        assert (tmp_path / "runs" / f"round0_k{k}" / "metrics.jsonl").is_file()
    record = json.loads(out.strip().splitlines()[-1].removeprefix(RESULT_PREFIX))
    assert record["args"]["workdir"] == "runs" and record["figures"]["s_per_step_k0"] > 0
    assert not (tmp_path / "bench_results.jsonl").exists()  # --no-results
