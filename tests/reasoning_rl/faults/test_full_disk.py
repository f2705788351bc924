"""A disk that fills while a run writes (a checkpoint, the logs): one line naming the folder and the full
disk, exit code 2, status.json failed, whatever library was writing. On a real, small file system:
a 1 MiB tmpfs mounted in a private mount namespace (root and ``unshare`` needed, else skipped)."""

import json
import os
import shlex
import shutil
import subprocess

import pytest

from tests.reasoning_rl.faults.conftest import PROG, TINY, TRAIN, env


def _can_mount_tmpfs(where) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {shlex.quote(str(where))}"],
                           capture_output=True)
    return probe.returncode == 0


def test_a_disk_that_fills_mid_run_is_named_in_one_line(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _can_mount_tmpfs(disk):
        pytest.skip("needs root and unshare to mount a small tmpfs")
    run = disk / "run"
    args = [*[a for a in TINY if not a.startswith(("trainer.steps", "trainer.save_every"))], "trainer.steps=50",
            "trainer.save_every=1", "trainer.keep_checkpoints=null", "evaluation.enabled=false",
            f"trainer.output_dir={run}"]
    script = (f"mount -t tmpfs -o size=1m tmpfs {shlex.quote(str(disk))} && "
              f"{shlex.join([TRAIN, *args])}; echo \"exit=$?\"; cat {shlex.quote(str(run / 'status.json'))}")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         timeout=300, env=env())
    assert "exit=2" in out.stdout, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{PROG}cannot ") and str(run) in line, line
    assert "disk is full" in line or "no space left" in line, line
    status = json.loads(out.stdout[out.stdout.index("{"):])
    assert status["status"] == "failed"
