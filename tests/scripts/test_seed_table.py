"""scripts/seed_table.py on hand-written results.json files: Student's t interval and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import load_script

seed_table = load_script("seed_table")


def _result(folder: Path, name: str, accuracy: float, problems: int = 200) -> Path:
    path = folder / name / "mawps_direct" / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"benchmark": {"name": "mawps_direct"},
                                "metrics": {"accuracy": {"value": accuracy, "num_problems": problems}}}))
    return path


def test_t_interval_by_hand() -> None:
    mean, low, high = seed_table.t_interval([1.0, 2.0, 3.0])
    # s = 1, n = 3, t_{0.975, 2} = 4.3027: half width 4.3027 / sqrt(3) = 2.4841
    assert mean == 2.0 and low == pytest.approx(2.0 - 2.4841, abs=1e-4) and high == pytest.approx(2.0 + 2.4841, abs=1e-4)
    with pytest.raises(ValueError, match="at least 2 values"):
        seed_table.t_interval([1.0])


def test_table_states_each_seed_and_the_mean_change(tmp_path: Path) -> None:
    base = _result(tmp_path, "base", 0.05)
    seeds = [_result(tmp_path, f"s{i}", a) for i, a in enumerate((0.06, 0.07, 0.08))]
    text = seed_table.table(base, seeds)
    assert "| base | 5.00% | |" in text and "| s2 | 8.00% | +3.00 |" in text
    assert "| mean of 3 seeds | 7.00% | **+2.00** [-0.48, +4.48] |" in text


def test_results_of_another_benchmark_or_size_exit_2(tmp_path: Path, capsys) -> None:
    base = _result(tmp_path, "base", 0.05)
    other = _result(tmp_path, "s0", 0.06, problems=100)
    assert seed_table.main([str(base), str(other), str(other)]) == 2
    assert "every result must be mawps_direct on 200 problems" in capsys.readouterr().err
