"""Sweeps through a real Slurm (``hydra/launcher=slurm``, nothing mocked): jobs finish and report,
``scancel`` and the time limit are recorded with their stage, a relaunch skips and resumes, and a
Slurm that cannot take the jobs is one line and exit code 2.

The tests marked ``slurm`` need a running cluster named by ``SLURM_CONF``: ``scripts/local_slurm.sh
start`` (what ``.ci/slurm.sh`` does); without one they are skipped, saying so."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from reasoning_rl.launch.slurm import sbatch_test_args
from reasoning_rl.reporting import report
from tests.conftest import free_port
from tests.reasoning_rl.conftest import TINY_OVERRIDES

TINY = [*TINY_OVERRIDES, "trainer.steps=3", "trainer.save_every=2"]
SLURM = [  # one CPU, no GPU, no memory request: what the local cluster (CPUs=2) can run two of at once
    "hydra/launcher=slurm", "hydra.launcher.gpus_per_task=null", "hydra.launcher.mem_gb=null",
    "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=10",
]
NO_SLURM = ("no Slurm cluster: start one with `scripts/local_slurm.sh start` and export the SLURM_CONF it prints "
            "(.ci/slurm.sh does both)")


REPO = Path(__file__).resolve().parents[3]


def _slurm_reachable() -> bool:
    if not os.environ.get("SLURM_CONF") or shutil.which("sbatch") is None:
        return False
    try:
        return subprocess.run(["scontrol", "ping"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_slurm = pytest.mark.skipif(not _slurm_reachable(), reason=NO_SLURM)


def _command(sweep_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "reasoning_rl.cli", "--multirun", f"hydra.sweep.dir={sweep_dir}", *TINY, *overrides]


def _sweep(sweep_dir: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    sweep_dir.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(_command(sweep_dir, *overrides), capture_output=True, text=True, cwd=sweep_dir.parent,
                          timeout=600, env=env)


def _start_sweep(sweep_dir: Path, *overrides: str) -> subprocess.Popen:
    sweep_dir.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(_command(sweep_dir, *overrides), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=sweep_dir.parent)


def _status(run: Path) -> dict:
    path = run / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _wait_for(condition, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, f"waited {timeout_s:.0f} s for {what}; the cluster: {_cluster_state()}"
        time.sleep(0.5)


def _scancel_once_it_checkpoints(run: Path, *flags: str) -> str:
    """``scancel *flags`` the run's job once it has written a checkpoint (it trains); the job id. Any checkpoint,
    not a given step's: the tiny run keeps only its newest ones, and a given one can be gone between two looks.
    The job may first wait for a CPU behind the previous tests' jobs: up to 240 s (a limit counts from its start)."""
    _wait_for(lambda: any(run.glob("checkpoint-*")), 240, "the run's first checkpoint")
    job_id = _status(run)["slurm_job_id"]
    subprocess.run(["scancel", *flags, job_id], check=True)
    return job_id


def _cluster_state() -> str:
    """The queue (job, state, reason) and the node's state: why a job has not run."""
    queue = subprocess.run(["squeue", "-h", "-o", "%i %T %r"], capture_output=True, text=True).stdout.strip()
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T %E"], capture_output=True, text=True).stdout.strip()
    return f"queue [{queue.replace(chr(10), '; ')}], node [{node.replace(chr(10), '; ')}]"


def _in_queue(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.returncode == 0 and bool(out.stdout.strip())


def _cancel_jobs_of(*sweeps: Path) -> None:
    """Leave no job of these sweeps behind (submitit names a folder after each job)."""
    ids = [p.name for sweep in sweeps for p in (sweep / ".submitit").glob("*_*") if p.is_dir()]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def _steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _submitit_start(sweep: Path, job_id: str) -> float:
    """When the job's process began (submitit's first log line, milliseconds)."""
    first = next((sweep / ".submitit" / job_id).glob("*_log.out")).read_text().splitlines()[0]
    stamp = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\)", first).group(1)
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def test_no_slurm_is_one_line_and_exit_2(tmp_path):
    # No sbatch on PATH (a laptop, a node without the Slurm client): nothing is submitted.
    env = {**os.environ, "PATH": str(tmp_path / "empty-bin")}
    out = _sweep(tmp_path / "sweep", *SLURM, "algo.kl.beta=0,0.04", env=env)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == ["reasoning-rl-train: hydra/launcher=slurm needs Slurm's sbatch, which is not on PATH here: run "
                     "the sweep on the cluster's login node, or start a local cluster (scripts/local_slurm.sh start) "
                     "and set SLURM_CONF"], out.stderr
    assert not (tmp_path / "sweep" / ".submitit").exists()


def test_a_slurm_conf_that_is_not_there_is_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "gone" / "slurm.conf"  # a stopped local cluster's, say
    env = {**os.environ, "SLURM_CONF": str(missing)}
    t0 = time.monotonic()
    out = _sweep(tmp_path / "sweep", *SLURM, "algo.kl.beta=0,0.04", env=env)
    assert out.returncode == 2 and time.monotonic() - t0 < 60  # sbatch alone would retry for 60 s
    assert out.stderr.strip().splitlines() == [
        f"reasoning-rl-train: SLURM_CONF={missing} is not a file: point it at the cluster's slurm.conf "
        "(scripts/local_slurm.sh start prints the line for a local cluster), or unset it to use the default"]
    assert not (tmp_path / "sweep" / ".submitit").exists()


def test_the_preflight_asks_for_what_the_launcher_submits():
    launcher = {"partition": "gpu", "account": None, "timeout_min": 240, "nodes": 1, "tasks_per_node": 1,
                "gpus_per_task": 1, "cpus_per_task": 8, "mem_gb": 64, "array_parallelism": 16}
    assert sbatch_test_args(launcher) == ["--partition=gpu", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=8",
                                          "--gpus-per-task=1", "--time=240", "--mem=64G"]


@pytest.mark.slurm
@needs_slurm
def test_an_unknown_partition_is_slurms_own_error_in_one_line(tmp_path):
    out = _sweep(tmp_path / "sweep", *SLURM, "hydra.launcher.partition=no_such_partition", "algo.kl.beta=0,0.04")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("reasoning-rl-train: Slurm refused the sweep's jobs (--partition=no_such_partition")
    assert "invalid partition specified: no_such_partition" in lines[0]  # sbatch's own words
    assert not (tmp_path / "sweep" / ".submitit").exists()


@pytest.mark.slurm
@needs_slurm
def test_a_2x2_sweep_runs_as_slurm_jobs_reports_and_relaunch_skips(tmp_path):
    sweep = tmp_path / "sweep"
    out = _sweep(sweep, *SLURM, "algo.kl.beta=0,0.04", "algo.group_size=2,4")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = sorted(sweep.glob("algo.group_size=*,algo.kl.beta=*/seed=0"))
    assert [r.parent.name for r in runs] == [f"algo.group_size={g},algo.kl.beta={b}" for g in (2, 4) for b in ("0", "0.04")]
    job_ids = []
    for run in runs:
        status = _status(run)
        assert status["status"] == "finished" and status["steps"] == 3
        assert re.fullmatch(r"\d+_[0-3]", status["slurm_job_id"]), status  # <array job>_<task>: scancel's name
        assert (run / "checkpoint-3").is_dir() and (run / "summary.json").exists()
        job_ids.append(status["slurm_job_id"])
    assert len(set(job_ids)) == 4 and len({j.split("_")[0] for j in job_ids}) == 1  # one array job

    # The overhead of Slurm per job: sbatch (the submission script is written just before it) to the
    # job's process starting on the node; then to the run's `running` record (imports, Hydra).
    array_id = job_ids[0].split("_")[0]
    submitted = next((sweep / ".submitit" / array_id).glob("*_submission.sh")).stat().st_mtime
    waits = sorted(_submitit_start(sweep, j) - submitted for j in job_ids)
    print(f"\nSlurm overhead per job, submission -> job process started: {', '.join(f'{w:.2f}' for w in waits)} s "
          f"(two at a time on CPUs=2; load average {os.getloadavg()[0]:.2f})")
    assert waits[0] < 30

    assert report.main([str(sweep)]) == 0
    table = (sweep / "report" / "report.md").read_text()
    assert sum("| finished |" in line for line in table.splitlines()) == 4
    for png in ("reward_curves.png", "accuracy_vs_algo_kl_beta.png"):
        assert (sweep / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The same sweep again: four new jobs, each skipping its finished run.
    again = _sweep(sweep, *SLURM, "algo.kl.beta=0,0.04", "algo.group_size=2,4")
    assert again.returncode == 0, again.stderr[-3000:]
    logs = [p.read_text() for p in (sweep / ".submitit").glob("*/*_log.out")]
    assert sum("already finished; skipped" in text for text in logs) == 4
    for run in runs:
        assert _steps(run) == [1, 2, 3]


@pytest.mark.slurm
@needs_slurm
def test_scancel_and_the_time_limit_are_recorded_and_the_relaunch_resumes(tmp_path):
    cancelled = tmp_path / "cancelled"
    killed = tmp_path / "time_limit"
    # A run long enough to be cancelled mid-run, and one that outlives a one-minute limit (signal_delay_s=0:
    # no warning before it, so Slurm's SIGTERM at the limit is what stops it).
    # 1000 steps: about 35 s of training on the local node, so the cancel lands mid-run (300 ran in 11 s).
    cancel_job = _start_sweep(cancelled, *SLURM, "trainer.steps=1000", "trainer.save_every=2", "algo.kl.beta=0")
    limit_job = _start_sweep(killed, *SLURM, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=0",
                             "trainer.steps=100000", "trainer.save_every=20", "algo.kl.beta=0")
    try:
        run = cancelled / "default" / "seed=0"
        job_id = _scancel_once_it_checkpoints(run)
        _wait_for(lambda: not _in_queue(job_id), 60, f"job {job_id} to leave the queue")
        status = _status(run)
        assert status["status"] == "failed" and status["stage"] == "training", status
        assert status["error"].startswith("Terminated: terminated by SIGTERM") and status["slurm_job_id"] == job_id
        assert cancel_job.wait(60) != 0  # the submitting process reports the job that did not finish
        done = _steps(run)
        assert 2 <= len(done) < 1000

        # Relaunched: resumes from the newest checkpoint and logs each step once.
        again = _sweep(cancelled, *SLURM, "trainer.steps=1000", "trainer.save_every=2", "algo.kl.beta=0")
        assert again.returncode == 0, again.stderr[-3000:]
        assert _status(run)["status"] == "finished" and _status(run)["slurm_job_id"] != job_id
        assert _steps(run) == list(range(1, 1001))

        # The time limit: Slurm's SIGTERM at one minute (checked every ~30 s), recorded like scancel.
        limited = killed / "default" / "seed=0"
        _wait_for(lambda: _status(limited).get("status") == "failed", 240, "the time limit")
        status = _status(limited)
        assert status["stage"] == "training" and status["error"].startswith("Terminated: terminated by SIGTERM")
        assert 30 <= status["wall_s"] < 180, status  # killed at 60-90 s of the job (slurmctld checks every ~30 s)
        assert list(limited.glob("checkpoint-*")), "the newest checkpoint is kept"
        assert limit_job.wait(60) != 0
        scontrol = subprocess.run(["scontrol", "show", "job", status["slurm_job_id"]], capture_output=True, text=True)
        # Slurm's own verdict while it still lists the job: TIMEOUT (COMPLETING with Reason=TimeLimit before that).
        assert scontrol.returncode != 0 or re.search(r"JobState=TIMEOUT|Reason=TimeLimit", scontrol.stdout), scontrol.stdout
    finally:
        for proc in (cancel_job, limit_job):
            if proc.poll() is None:
                proc.kill()
        _cancel_jobs_of(cancelled, killed)


@pytest.mark.slurm
@needs_slurm
def test_the_warning_before_the_time_limit_stops_the_run_with_a_record(tmp_path):
    # The USR2 Slurm sends signal_delay_s before the limit, sent here by hand once the run trains: a short
    # limit's own warning comes at a moment Slurm's 30-60 s resolution leaves open, possibly before the
    # job's handlers exist. timeout_min=2 is under submitit's guaranteed walltime, so the signal means
    # "timed out"; with max_num_timeout=0 no requeue is left and the run stops, recorded, checkpoints kept.
    sweep = tmp_path / "sweep"
    proc = _start_sweep(sweep, *SLURM, "hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=0",
                        "trainer.steps=100000", "trainer.save_every=2", "algo.kl.beta=0")
    try:
        run = sweep / "default" / "seed=0"
        job_id = _scancel_once_it_checkpoints(run, "--signal=USR2")
        _wait_for(lambda: _status(run).get("status") == "failed", 60, "the run's failed record")
        status = _status(run)
        assert status["stage"] == "training" and status["slurm_job_id"] == job_id, status
        assert status["error"].startswith("TimeLimit: Slurm's time limit is near"), status
        assert "launch the same sweep again to resume" in status["error"]
        assert list(run.glob("checkpoint-*"))
        output, _ = proc.communicate(timeout=90)  # the job left its result: the submitter stops waiting
        assert proc.returncode != 0 and "TimeLimit" in output, output[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        _cancel_jobs_of(sweep)


@pytest.mark.slurm
@needs_slurm
def test_the_multinode_template_runs_as_a_one_node_job(tmp_path):
    # scripts/slurm/multinode.sbatch on the local cluster: one node, two processes (torchrun's c10d
    # rendezvous at the allocation's first node), the tiny run through the CLI.
    run = tmp_path / "run"
    env = {**os.environ, "PYTHON": sys.executable, "NPROC_PER_NODE": "2", "RDZV_PORT": str(free_port()),
           "JOIN_TIMEOUT_S": "60"}
    out = subprocess.run(["sbatch", "--wait", "--parsable", "--nodes=1", "--cpus-per-task=2", "--time=10",
                          f"--chdir={REPO}", f"--output={tmp_path}/job.out", str(REPO / "scripts/slurm/multinode.sbatch"),
                          *TINY, f"trainer.output_dir={run}"],
                         capture_output=True, text=True, env=env, timeout=600)
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert out.returncode == 0, out.stderr + log[-3000:]
    job_id = out.stdout.strip().split(";")[0]
    assert "1 node(s) x 2 process(es), rendezvous at " in log
    status = _status(run)
    assert status["status"] == "finished" and status["steps"] == 3 and status["slurm_job_id"] == job_id
    ranks = {json.loads(line)["rank"] for line in (run / "completions.jsonl").read_text().splitlines()}
    assert ranks == {0, 1}
    assert _steps(run) == [1, 2, 3]
