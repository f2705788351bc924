"""Packaging: every package folder is listed, and the Hydra configs are found after a
plain non-editable `pip install .` (not only from the source checkout)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"reasoning_rl.conf"}
    for top in ("reasoning_rl", "rewards", "benchmarks"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    assert found == listed, f"missing in pyproject: {found - listed}; listed but absent: {listed - found}"


def test_configs_found_from_source_checkout():
    from hydra import compose, initialize_config_module

    from reasoning_rl.config_store import register_configs

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="reasoning_rl.conf"):
        cfg = compose(config_name="train", overrides=["algo.group_size=4"])
    assert cfg.algo.group_size == 4 and cfg.task.name == "arithmetic"


@pytest.mark.slow
def test_non_editable_install_finds_configs(tmp_path):
    """Install a plain (non-editable) copy into a folder of its own and run it from
    elsewhere: the configs must come from the installed copy."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(ROOT)], check=True, cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import reasoning_rl.conf as c, rewards, benchmarks; print(c.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, check=True, env=env,
    ).stdout.strip()
    assert where.startswith(str(site)), f"configs imported from {where}, not from the installed copy"
    assert (Path(where).parent / "task" / "arithmetic.yaml").exists()
    job = subprocess.run([sys.executable, "-m", "reasoning_rl.cli", "--cfg", "job", "algo=dapo"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    assert job.returncode == 0, job.stderr
    assert "eps_high: 0.28" in job.stdout
