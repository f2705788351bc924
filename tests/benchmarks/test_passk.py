"""The pass@k spectrum on hand-worked numbers, and its PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.passk import spectrum, write_spectrum_png


def test_spectrum_by_hand() -> None:
    # 4 problems, n = 4 samples, c = 0, 1, 2, 4 correct. Per problem pass@k = 1 - C(n-c, k) / C(n, k):
    #   k=1: 0, 1/4, 2/4, 1                           -> mean 0.4375
    #   k=2: 0, 1 - C(3,2)/C(4,2) = 1/2, 1 - 1/6, 1   -> mean (0 + 0.5 + 0.8333 + 1) / 4 = 0.5833
    #   k=3: 0, 1 - C(3,3)/C(4,3) = 3/4, 1 (n-c < k), 1 -> mean 0.6875
    #   k=4: 0, 1, 1, 1                               -> mean 0.75
    correct = [[False] * 4, [True, False, False, False], [False, True, True, False], [True] * 4]
    assert spectrum(correct) == pytest.approx([0.4375, (0.5 + 5 / 6 + 1) / 4, 0.6875, 0.75])


def test_greedy_has_a_one_point_spectrum_and_no_panel(tmp_path: Path) -> None:
    assert spectrum([[True], [False]]) == [0.5]
    assert write_spectrum_png(tmp_path / "p.png", {"gsm8k": {"A": [0.5]}}) is None
    path = write_spectrum_png(tmp_path / "p.png", {"aime25": {"A": [0.1, 0.2], "B": [0.2, 0.25]}, "gsm8k": {"A": [0.5]}})
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
