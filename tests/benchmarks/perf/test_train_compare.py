"""``reasoning-rl-bench train --compare trl`` without TRL installed: one line naming the install, exit code 2,
before any run starts."""

import importlib.util

from benchmarks import bench


def test_compare_trl_without_trl_names_the_install(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    assert bench.main(["train", "--compare", "trl", "--rounds", "1", "--steps", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("reasoning-rl-bench: --compare trl needs TRL, which is not installed: pip install trl==1.16.0 "
                       "(the version docs/performance.md's figures were measured with)")
    assert not any("Traceback" in line for line in err)
