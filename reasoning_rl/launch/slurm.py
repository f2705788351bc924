"""Sweeps on Slurm (``hydra/launcher=slurm``, Hydra's submitit launcher): a check before anything is
submitted, and the signals a Slurm job receives turned into a recorded failure.

Registered in ``conf/train.yaml`` as a Hydra callback (``hydra.callbacks.slurm``), so it plugs in at
Hydra's own seam and the run loop knows nothing of Slurm:

- :meth:`SlurmCallback.on_multirun_start` (the submitting process, before the launcher is built):
  with the Slurm launcher, :func:`preflight` asks Slurm whether it would accept the jobs
  (``sbatch --test-only`` with the launcher's partition, account and resources). No ``sbatch`` on
  PATH, a controller that does not answer, an unknown partition or a request no node can satisfy
  end in one line and exit code 2 (Slurm's own words passed through), and nothing is submitted.
  (Hydra would turn a callback's exception into a warning: the callback exits itself.)
- :meth:`SlurmCallback.on_job_start` (inside each Slurm job): SIGTERM (``scancel``, the time
  limit, a node shutting down) raises :class:`~reasoning_rl.cli.Terminated`, so the run's
  ``status.json`` says ``failed`` with the stage it stopped in (submitit's own handler only logs
  SIGTERM, and the job would die at SIGKILL with ``running`` on record). submitit's warning signal
  before the time limit (``--signal=USR2@signal_delay_s``) keeps its meaning: requeue while
  ``hydra.launcher.max_num_timeout`` allows; when it does not, the run stops there as
  :class:`TimeLimit`, recorded the same way. Either way the newest checkpoint is kept, and
  launching the same sweep again resumes from it (docs/sweeps.md).

The job's Slurm id is recorded in ``status.json`` by :func:`reasoning_rl.run_folder.status.write_status`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from reasoning_rl.cli import PROG, Terminated
from reasoning_rl.entry_points import exit_with
from reasoning_rl.errors import UserError

SLURM_LAUNCHER = "SlurmLauncher"
"""The end of the submitit Slurm launcher's ``_target_`` (``hydra/launcher=slurm``)."""

SLURM_TIMEOUT_S = 30.0
"""How long the preflight waits for Slurm's controller."""

SBATCH_FLAGS: dict[str, str] = {
    "partition": "--partition", "account": "--account", "qos": "--qos", "constraint": "--constraint",
    "nodes": "--nodes", "tasks_per_node": "--ntasks-per-node", "cpus_per_task": "--cpus-per-task",
    "gpus_per_node": "--gpus-per-node", "gpus_per_task": "--gpus-per-task", "gres": "--gres",
    "timeout_min": "--time",
}
"""Launcher key -> the ``sbatch`` option submitit turns it into; ``mem_gb`` is ``--mem=<N>G``."""


class SlurmUnavailable(UserError, RuntimeError):
    """``hydra/launcher=slurm`` on a machine where Slurm cannot take the jobs."""


class TimeLimit(BaseException):
    """Slurm's warning before the job's time limit, with no requeue left (``max_num_timeout``)."""


def is_slurm_launcher(config: DictConfig) -> bool:
    target = str(config.hydra.launcher.get("_target_", "")) if "launcher" in config.hydra else ""
    return target.endswith(SLURM_LAUNCHER)


def sbatch_test_args(launcher: dict[str, Any]) -> list[str]:
    """The ``sbatch --test-only`` options that stand for the launcher's request."""
    args = [f"{flag}={launcher[key]}" for key, flag in SBATCH_FLAGS.items() if launcher.get(key) not in (None, "")]
    if launcher.get("mem_gb"):
        args.append(f"--mem={launcher['mem_gb']}G")
    return args


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def preflight(launcher: dict[str, Any], timeout_s: float = SLURM_TIMEOUT_S) -> None:
    """Raise :class:`SlurmUnavailable` unless Slurm would accept a job with the launcher's request."""
    conf_file = os.environ.get("SLURM_CONF")
    if conf_file and not os.path.isfile(conf_file):  # sbatch would retry reading it for 60 s
        raise SlurmUnavailable(
            f"SLURM_CONF={conf_file} is not a file: point it at the cluster's slurm.conf (scripts/local_slurm.sh "
            "start prints the line for a local cluster), or unset it to use the default")
    if shutil.which("sbatch") is None:
        raise SlurmUnavailable(
            "hydra/launcher=slurm needs Slurm's sbatch, which is not on PATH here: run the sweep on the "
            "cluster's login node, or start a local cluster (scripts/local_slurm.sh start) and set SLURM_CONF")
    conf = os.environ.get("SLURM_CONF", "the default slurm.conf")
    command = ["sbatch", "--test-only", "--job-name=reasoning-rl-preflight", *sbatch_test_args(launcher),
               "--wrap=true"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable(f"Slurm's controller did not answer within {timeout_s:.0f} s (sbatch --test-only, "
                               f"{conf}); check `scontrol ping`") from None
    if out.returncode != 0:
        said = _one_line(out.stderr or out.stdout) or f"exit code {out.returncode}"
        raise SlurmUnavailable(f"Slurm refused the sweep's jobs ({' '.join(sbatch_test_args(launcher))}; {conf}): "
                               f"{said}")


class SlurmCallback(Callback):
    """Hydra callback: :func:`preflight` before a Slurm sweep, :func:`handle_job_signals` in each job."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not is_slurm_launcher(config):
            return
        try:
            preflight(OmegaConf.to_container(config.hydra.launcher, resolve=True))  # type: ignore[arg-type]
        except SlurmUnavailable as exc:
            # Hydra turns a callback's exception into a warning and goes on: the one line and exit
            # code 2 happen here (SystemExit passes through Hydra).
            exit_with(PROG, exc)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if os.environ.get("SLURM_JOB_ID") and threading.current_thread() is threading.main_thread():
            handle_job_signals()


def handle_job_signals() -> None:
    """In a Slurm job: SIGTERM raises :class:`~reasoning_rl.cli.Terminated`; submitit's time-limit
    handler (USR2), when it would end the job without a requeue, raises :class:`TimeLimit` instead
    of its own exception."""
    signal.signal(signal.SIGTERM, _terminate_once)
    usr = signal.getsignal(signal.SIGUSR2)
    if callable(usr):
        signal.signal(signal.SIGUSR2, _time_limit_handler(usr))


def _terminate_once(signum: int, _frame: Any) -> None:
    """Slurm signals every process of the step and ``srun`` forwards the signal again: the second
    SIGTERM would interrupt the recording of the first, so later ones are ignored (SIGKILL follows
    after the cluster's KillWait if the process does not end)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop = Terminated(signum)
    atexit.register(_tell_the_submitter, f"{type(stop).__name__}: {stop}")
    raise stop


def _tell_the_submitter(message: str) -> None:
    """Leave submitit's result file saying why the job ended, so that the submitting process stops
    waiting and reports it. Without this it learns a job's end from ``sacct`` only, which a cluster
    without accounting (the local one) lacks: it would wait for ever. Runs at interpreter exit
    (after the run's failure is recorded), before Slurm's SIGKILL."""
    try:
        from submitit import JobEnvironment
        from submitit.core.utils import cloudpickle_dump, temporary_save_path

        path = JobEnvironment().paths.result_pickle
        if not path.exists():
            with temporary_save_path(path) as tmp:  # written whole, then renamed, as submitit does
                cloudpickle_dump(("error", message), tmp)
    except Exception:  # best effort: the run's own record is already written
        pass


def _time_limit_handler(submitit_handler: Any) -> Any:
    def handler(signum: int, frame: Any) -> None:
        try:
            submitit_handler(signum, frame)  # requeues (and exits) while max_num_timeout allows
        except Exception as exc:
            stop = TimeLimit(f"Slurm's time limit is near ({exc}); the newest checkpoint is kept: launch the same "
                             "sweep again to resume from it, or raise hydra.launcher.timeout_min / max_num_timeout")
            atexit.register(_tell_the_submitter, f"{type(stop).__name__}: {stop}")
            raise stop from None
    return handler
