"""`reasoning-rl-bench gpu --acceptance`: without a GPU one line per row saying what it skipped; the rows
that can run on the CPU (--device cpu --small) run for real and pass."""

import json

import pytest
import torch

from benchmarks import bench
from benchmarks.perf.gpu_acceptance import ROWS, acceptance


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the rows run instead")
def test_without_a_gpu_every_row_says_what_it_skipped(capsys):
    assert bench.main(["gpu", "--acceptance", "--no-results"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("BENCH_RESULT")]
    assert lines == [f"skipped {row.name}: {row.what}: no CUDA GPU here (torch.cuda.is_available() is False)"
                     for row in ROWS]


@pytest.mark.slow
def test_the_cpu_rows_run_at_small_shapes_and_pass(capsys):
    code, results = acceptance("cpu", small=True)
    out = capsys.readouterr().out
    assert code == 0, out
    ran = {name for name, r in results.items() if "skipped" not in r}
    assert ran == {"bf16_vs_fp32", "lean_vs_hf", "lm_head"}, json.dumps(results)
    assert all(results[name]["ok"] for name in ran)
    needs_cuda = {row.name for row in ROWS if row.needs_cuda}
    assert {name for name, r in results.items() if "skipped" in r} == needs_cuda
    table = [line for line in out.splitlines() if line.startswith("| ") and "| pass |" in line]
    assert len(table) == 3
