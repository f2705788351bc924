"""Every place the toolkit starts a process is listed here with how it keeps the user's working directory
from shadowing the package (issue 42: a rewards.py in the working directory once replaced the reward
package in every worker). A new start site fails this test until it is added to SUBPROCESS_STARTS, with a
case in tests/reasoning_rl/faults/test_shadowing.py that runs it from a folder holding a rewards.py and
a reasoning_rl.py."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

START = re.compile(r"subprocess\.(?:Popen|run|call|check_call|check_output)\(|\.Process\(|\bos\.(?:exec|spawn)\w*\(|"
                   r"_launcher\.popen\(")

SUBPROCESS_STARTS = {
    "rewards/pool.py": "reward workers: python -c WORKER_BOOT with the parent's sys.path set before any project "
                       "import (test_shadowing: workers, a training run)",
    "reasoning_rl/rollouts/async_engine.py": "the asynchronous generator: multiprocessing spawn, which sets the parent's "
                                     "sys.path before unpickling its target (test_shadowing: async_generator)",
    "rewards/code/sandbox/host.py": "the code sandbox's zygote: python -I with its own boot code "
                                    "(test_shadowing: the code sandbox)",
    "rewards/code/sandbox/jail.py": "probes whether bwrap/unshare work: python -I -c pass",
    "reasoning_rl/launch/slurm.py": "runs Slurm's own programs (sbatch --test-only before a sweep is submitted); no Python "
                             "process of the toolkit's",
}
"""Toolkit file -> how its process starts import the parent's code (and the test that runs it)."""

NOT_THE_TOOLKIT = ("rewards/code/hostile.py",)
"""Files whose matches are text, not starts (hostile programs the sandbox tests run)."""


def test_every_process_the_toolkit_starts_is_listed_with_its_shadowing_rule():
    found = sorted({p.relative_to(ROOT).as_posix() for d in ("reasoning_rl", "rewards")
                    for p in (ROOT / d).rglob("*.py") if START.search(p.read_text())} - set(NOT_THE_TOOLKIT))
    assert found == sorted(SUBPROCESS_STARTS), (
        "a file starts a process and is not in SUBPROCESS_STARTS (or one listed no longer does): make its process "
        "import the parent's code whatever the working directory holds, add a case to test_shadowing.py, and list it")
