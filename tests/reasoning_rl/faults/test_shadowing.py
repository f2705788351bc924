"""A user's files in the working directory cannot change what scores a run: reward workers (and the
asynchronous generator, and the sandbox) import the same code as the training process."""

import json
import subprocess
import sys

import pytest

from rewards.pool import WorkerPool
from tests.reasoning_rl.faults.conftest import train

SHADOWS = {
    "rewards.py": "raise ImportError('the user rewards.py was imported instead of the package')\n",
    "reasoning_rl.py": "raise ImportError('the user reasoning_rl.py was imported instead of the package')\n",
}
"""Natural names for a user's own files in an RL project; each raises if anything imports it."""


@pytest.fixture
def shadowed_cwd(tmp_path, monkeypatch):
    cwd = tmp_path / "project"
    cwd.mkdir()
    for name, text in SHADOWS.items():
        (cwd / name).write_text(text)
    return cwd


def _where_rewards_is() -> str:
    import rewards

    return rewards.__file__


def test_a_reward_worker_imports_the_parents_rewards_package(shadowed_cwd, monkeypatch):
    monkeypatch.chdir(shadowed_cwd)
    pool = WorkerPool(1)
    try:
        (outcome,) = pool.map(_where_rewards_is, [()], 30)
    finally:
        pool.close()
    import rewards

    assert outcome.status == "ok", outcome.message
    assert outcome.value == rewards.__file__


@pytest.mark.parametrize("extra", [[], ["rollout.max_staleness=1"]], ids=["workers", "async_generator"])
def test_training_from_a_folder_with_rewards_py_and_reasoning_rl_py_scores_with_the_package(shadowed_cwd, extra):
    # It used to exit 0, "finished", 0.0% -> 0.0%, with every worker dead at start (478 stderr lines).
    run = shadowed_cwd / "run"
    out = train(shadowed_cwd, f"trainer.output_dir={run}", *extra)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the user " not in out.stderr
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["verifier/errors"] == 0 and m["reward/unscorable_fraction"] == 0.0 for m in metrics), metrics


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P (no working directory on sys.path) is 3.11+")
def test_the_code_sandbox_runs_a_program_from_a_folder_with_shadowing_files(shadowed_cwd):
    # The sandbox's zygote starts isolated (-I) with its own boot code: a program is run and tested as anywhere else.
    probe = ("import rewards\n"
             "fields = {'test_list': ['assert add(1, 2) == 3']}\n"
             "r = rewards.get_verifier('code')('```python\\ndef add(a, b):\\n    return a + b\\n```', None, **fields)\n"
             "assert (r.status, r.score) == ('ok', 1.0), r\n")
    # The console script's way to import: the package from the environment, never the working directory.
    out = subprocess.run([sys.executable, "-P", "-c", probe], cwd=shadowed_cwd, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
